"""Build the torch model a job trains: from the catalog (random init, no hub) or a local folder."""

from __future__ import annotations

import os
from typing import Any

from ._catalog import MODELS, SIZES, dims, size_config

_DROPOUT_KEYS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout", "attention_dropout",
                 "resid_pdrop", "embd_pdrop", "attn_pdrop", "dropout_rate", "classifier_dropout_prob",
                 "seq_classif_dropout", "summary_first_dropout")


def _apply_dropout(cfg: Any, dropout: float | None) -> None:
    if dropout is None:
        return
    for key in _DROPOUT_KEYS:
        if hasattr(cfg, key) and getattr(cfg, key) is not None:
            setattr(cfg, key, float(dropout))


def model_task(model: str) -> str:
    """The training task of a catalog model or a local folder (read from its config)."""
    if model in MODELS:
        return MODELS[model].task
    import transformers

    cfg = transformers.AutoConfig.from_pretrained(model, trust_remote_code=False, local_files_only=True)
    if cfg.is_encoder_decoder:
        return "seq2seq-lm"
    archs = " ".join(cfg.architectures or [])
    if "CausalLM" in archs or "LMHead" in archs or cfg.model_type in ("gpt2", "gpt_neo", "llama", "opt"):
        return "causal-lm"
    return "sequence-classification"


def build_model(model: str = "bert-base-cased", size: str = "tiny", dropout: float | None = None,
                num_labels: int = 2, seed: int | None = 0) -> Any:
    """The torch model a tcbench job trains, for your own loop.

    A catalog name builds the architecture from its published configuration (``size="base"``) or a
    shrunken preset (``tiny``/``small``) with random weights — nothing is downloaded. A local folder
    that ``from_pretrained`` can read is loaded from disk (``trust_remote_code`` stays off).
    """
    import torch
    import transformers

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if seed is not None:
        torch.manual_seed(seed)
    if model not in MODELS:
        if not os.path.isdir(model):
            raise ValueError(f"model={model!r} is neither a catalog model ({', '.join(MODELS)}) nor a local folder")
        task = model_task(model)
        auto = {"seq2seq-lm": transformers.AutoModelForSeq2SeqLM, "causal-lm": transformers.AutoModelForCausalLM,
                "sequence-classification": transformers.AutoModelForSequenceClassification}[task]
        kwargs = {"num_labels": num_labels} if task == "sequence-classification" else {}
        m = auto.from_pretrained(model, local_files_only=True, trust_remote_code=False, **kwargs)
        _apply_dropout(m.config, dropout)
        return m
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
