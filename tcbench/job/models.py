"""Build the torch model a job trains: from the catalog (random init, no hub) or a local folder."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tcbench.core.catalog import MODELS, SIZES, dims, size_config, usable_positions
from tcbench.job.data import OWN_TOKENIZER_FILES
from tcbench.core.spec import SpecError, is_factory

_DROPOUT_KEYS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "attention_dropout",
                 "resid_pdrop", "embd_pdrop", "attn_pdrop", "dropout_rate", "classifier_dropout_prob",
                 "seq_classif_dropout", "summary_first_dropout")


def _apply_dropout(cfg: Any, dropout: float | None) -> None:
    if dropout is None:
        return
    for key in _DROPOUT_KEYS:
        if hasattr(cfg, key) and getattr(cfg, key) is not None:
            setattr(cfg, key, float(dropout))


_AUTO = {"seq2seq-lm": "AutoModelForSeq2SeqLM", "causal-lm": "AutoModelForCausalLM",
         "sequence-classification": "AutoModelForSequenceClassification"}
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
FOLDER_ALLOWED = ("a catalog model, or a local folder with config.json, weights (model.safetensors or "
                  "pytorch_model.bin) and a text model transformers can load with a classification or LM head")


def _task_of(cfg: Any) -> str:
    if cfg.is_encoder_decoder:
        return "seq2seq-lm"
    archs = " ".join(cfg.architectures or [])
    if "CausalLM" in archs or "LMHead" in archs or cfg.model_type in ("gpt2", "gpt_neo", "llama", "opt"):
        return "causal-lm"
    return "sequence-classification"


def model_task(model: str) -> str:
    """The training task of a catalog model or a local folder (read from its config)."""
    if model in MODELS:
        return MODELS[model].task
    import transformers

    return _task_of(transformers.AutoConfig.from_pretrained(model, trust_remote_code=False, local_files_only=True))


def _tokenizer_size(folder: Path) -> tuple[str, int] | None:
    """(file, number of tokens) of the folder's own tokenizer, or None when it ships none."""
    for name in OWN_TOKENIZER_FILES:
        path = folder / name
        if path.is_file():
            try:
                if name == "tokenizer.json":
                    from tokenizers import Tokenizer

                    return name, Tokenizer.from_file(str(path)).get_vocab_size()
                text = path.read_text(encoding="utf-8")
                return name, len(json.loads(text)) if name == "vocab.json" else len(text.splitlines())
            except Exception as exc:  # noqa: BLE001 - any unreadable tokenizer file is the same named error
                raise SpecError("model", str(folder), FOLDER_ALLOWED,
                                f"model={str(folder)!r}: its tokenizer {name} cannot be read ({exc})") from None
    return None


def check_local_model(folder: str, seq_len: int, data_vocab: int | None) -> None:
    """Check a local model folder before a job loads it: config, a supported head, weights, a vocabulary
    that covers its own tokenizer (jobs tokenize text with it) or, when it has none, the shipped tokenizer
    (``data_vocab`` tokens; None: the data is a batch factory's), and positions for ``seq_len``.
    A SpecError naming the field otherwise."""
    def bad(what: str, allowed: str = FOLDER_ALLOWED) -> SpecError:
        return SpecError("model", folder, allowed, f"model={folder!r}: {what}; allowed: {allowed}")

    path = Path(folder)
    if not path.is_dir():
        raise bad("no such folder")
    if not (path / "config.json").is_file():
        raise bad("has no config.json (a folder written by save_pretrained has one)")
    import transformers

    try:
        cfg = transformers.AutoConfig.from_pretrained(folder, trust_remote_code=False, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise bad(f"its config.json cannot be read ({str(exc).strip().splitlines()[0][:200]})") from None
    task = _task_of(cfg)
    if type(cfg) not in getattr(transformers, _AUTO[task])._model_mapping:
        raise bad(f"model_type {cfg.model_type!r} has no {task} head in transformers {transformers.__version__}")
    if not any((path / name).is_file() for name in _WEIGHTS):
        raise bad(f"has no weights ({', '.join(_WEIGHTS)})")
    vocab = getattr(cfg, "vocab_size", None)
    own = _tokenizer_size(path)
    if own is not None:
        from tcbench.job.data import job_tokenizer

        try:
            job_tokenizer(folder)
        except Exception as exc:  # noqa: BLE001 - any tokenizer that will not load is the same named error
            raise bad(f"its own tokenizer ({own[0]}) cannot be loaded by AutoTokenizer "
                      f"({type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''})")
    if vocab is not None and own is not None and own[1] > vocab:
        raise bad(f"its own tokenizer ({own[0]}) has {own[1]:,} tokens but vocab_size={vocab:,}",
                  f"a vocab_size of at least {own[1]:,}")
    if vocab is not None and own is None and data_vocab is not None and vocab < data_vocab:
        raise bad(f"vocab_size={vocab:,} is smaller than the data's tokenizer ({data_vocab:,} tokens; jobs "
                  "tokenize with it), so its ids would index past the embedding", f"a vocab_size >= {data_vocab:,}")
    limit = usable_positions(cfg.model_type, getattr(cfg, "max_position_embeddings", None),
                             getattr(cfg, "pad_token_id", 1))
    if limit is not None and seq_len > limit:
        raise SpecError("seq_len", seq_len, f"1..{limit}", f"seq_len={seq_len} is beyond the {limit} positions of "
                                                            f"{folder}; allowed: 1..{limit}")


def build_model(model: str = "bert-base-cased", size: str = "tiny", dropout: float | None = None,
                num_labels: int = 2, seed: int | None = 0) -> Any:
    """The torch model a tcbench job trains, for your own loop.

    A catalog name builds the architecture from its published configuration (``size="base"``) or a
    shrunken preset (``tiny``/``small``) with random weights — nothing is downloaded. A local folder
    that ``from_pretrained`` can read is loaded from disk (``trust_remote_code`` stays off). A factory
    ``"package.module:function"`` is imported and called with the arguments it accepts.
    """
    import torch
    import transformers

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if seed is not None:
        torch.manual_seed(seed)
    if is_factory(model):
        from tcbench.job.factory import build_model as from_factory

        return from_factory(model, size, 128, num_labels, dropout, seed or 0)
    if model not in MODELS:
        if not os.path.isdir(model):
            raise ValueError(f"model={model!r} is neither a catalog model ({', '.join(MODELS)}) nor a local folder")
        task = model_task(model)
        auto = getattr(transformers, _AUTO[task])
        kwargs = {"num_labels": num_labels} if task == "sequence-classification" else {}
        m = auto.from_pretrained(model, local_files_only=True, trust_remote_code=False, **kwargs)
        _apply_dropout(m.config, dropout)
        return _name_loss(m)
    if size not in SIZES:
        raise ValueError(f"size={size!r} is not allowed; allowed: {', '.join(SIZES)}")
    info = MODELS[model]
    config_cls = getattr(transformers, info.config_class)
    kwargs = size_config(model, size)
    if info.task == "sequence-classification":
        kwargs["num_labels"] = num_labels
    if info.family == "t5":
        kwargs.update(decoder_start_token_id=0, pad_token_id=0, eos_token_id=6)
    if info.family == "gpt2":
        kwargs.update(bos_token_id=5, eos_token_id=6, pad_token_id=0)
    cfg = config_cls(**kwargs)
    _apply_dropout(cfg, dropout)
    model_cls = getattr(transformers, info.model_class)
    m = model_cls(cfg)
    if info.family == "gpt2":
        m.config.pad_token_id = 0
    return _name_loss(m)


def _name_loss(m: Any) -> Any:
    """The loss decided before the first step. A model whose class names no loss transformers knows
    (``GPT2LMHeadModel``: ``loss_type`` None) gets the one
    transformers falls back to, ``ForCausalLM``: the same loss, without the ``logger.warning_once`` that its
    ``loss_function`` calls in every step and torch.compile breaks the graph on. Measured on the demo's spec: a warm
    Inductor job compiles in 2.5-2.6 s instead of 3.6 (Dynamo traces one graph, not three), and steps as fast (16
    alternating forked jobs: log difference 0.010 ± 0.012 in favour of one graph)."""
    if getattr(m, "loss_type", "") is None:
        m.loss_type = "ForCausalLM"
    config = getattr(m, "config", None)
    if getattr(config, "problem_type", "") is None and type(m).__name__.endswith("ForSequenceClassification"):
        # a classifier decides its loss at its first forward and writes it into its config (BERT's
        # ``self.config.problem_type = ...``): a graph traced before it guards on the None, and the second step fails
        # that guard (a recompile; a precompiled loss refused, tcbench.job.precompiled). Decided here as that
        # forward decides for integer labels, which every tcbench batch has.
        config.problem_type = "regression" if config.num_labels == 1 else "single_label_classification"
    return m


def count_params(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def flops_per_step(model_name: str, size: str, n_params: int, batch_size: int, seq_len: int,
                   task: str = "sequence-classification") -> float:
    """Training FLOPs of one step: 6·N·tokens for the dense weights plus 12·L·H·S·tokens for attention.

    N excludes the input embedding matrix (a lookup, not a matmul) unless the LM head reuses it
    (causal and seq2seq LMs tie it to the output projection, a real matmul). For a local folder
    the estimate is 6·N·tokens.
    """
    tokens = batch_size * seq_len
    if model_name not in MODELS:
        return 6.0 * n_params * tokens
    d = dims(model_name, size)
    dense = n_params if task != "sequence-classification" else max(n_params - d["vocab"] * d["hidden"], 1)
    return 6.0 * dense * tokens + 12.0 * d["layers"] * d["hidden"] * seq_len * tokens
