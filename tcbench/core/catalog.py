"""The model catalog: the architectures SageMaker Training Compiler was tested on.

Plain data, no torch import: the panel and the CLI list models without loading the ML stack.
``base`` is the published configuration (real dimensions, random weights: nothing is downloaded);
``small`` and ``tiny`` keep the architecture and shrink it for teaching and tests. Parameter counts
are computed from the dimensions (checked against the built models by the tests).
"""

from __future__ import annotations

from dataclasses import dataclass

SIZES = ("tiny", "small", "base")

# The shipped tokenizer's vocabulary (data/task/tokenizer.json); tiny/small models use it, base
# models keep their published vocabulary (the shipped ids fit inside it).
SHIPPED_VOCAB = 4096


@dataclass(frozen=True)
class ModelInfo:
    name: str
    family: str          # bert, distilbert, gpt2, roberta, xlm-roberta, albert, t5
    task: str            # sequence-classification, causal-lm, seq2seq-lm
    config_class: str    # transformers config class name
    model_class: str     # transformers model class name (the head per family)
    base: dict           # the published dimensions (transformers keyword names)


_ENC = "sequence-classification"


def _bert_like(vocab: int, layers: int, hidden: int, heads: int, ffn: int, positions: int = 512, **extra) -> dict:
    return dict(vocab_size=vocab, num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                intermediate_size=ffn, max_position_embeddings=positions, **extra)


MODELS: dict[str, ModelInfo] = {m.name: m for m in [
    ModelInfo("bert-base-cased", "bert", _ENC, "BertConfig", "BertForSequenceClassification",
              _bert_like(28996, 12, 768, 12, 3072)),
    ModelInfo("bert-base-uncased", "bert", _ENC, "BertConfig", "BertForSequenceClassification",
              _bert_like(30522, 12, 768, 12, 3072)),
    ModelInfo("distilbert-base-uncased", "distilbert", _ENC, "DistilBertConfig",
              "DistilBertForSequenceClassification",
              dict(vocab_size=30522, n_layers=6, dim=768, n_heads=12, hidden_dim=3072, max_position_embeddings=512)),
    ModelInfo("gpt2", "gpt2", "causal-lm", "GPT2Config", "GPT2LMHeadModel",
              dict(vocab_size=50257, n_layer=12, n_embd=768, n_head=12, n_positions=1024)),
    ModelInfo("roberta-base", "roberta", _ENC, "RobertaConfig", "RobertaForSequenceClassification",
              _bert_like(50265, 12, 768, 12, 3072, positions=514, pad_token_id=1, type_vocab_size=1)),
    ModelInfo("roberta-large", "roberta", _ENC, "RobertaConfig", "RobertaForSequenceClassification",
              _bert_like(50265, 24, 1024, 16, 4096, positions=514, pad_token_id=1, type_vocab_size=1)),
    ModelInfo("xlm-roberta-base", "xlm-roberta", _ENC, "XLMRobertaConfig", "XLMRobertaForSequenceClassification",
              _bert_like(250002, 12, 768, 12, 3072, positions=514, pad_token_id=1, type_vocab_size=1)),
    ModelInfo("albert-base-v2", "albert", _ENC, "AlbertConfig", "AlbertForSequenceClassification",
              dict(vocab_size=30000, embedding_size=128, num_hidden_layers=12, hidden_size=768,
                   num_attention_heads=12, intermediate_size=3072, max_position_embeddings=512)),
    ModelInfo("t5-base", "t5", "seq2seq-lm", "T5Config", "T5ForConditionalGeneration",
              dict(vocab_size=32128, num_layers=12, num_decoder_layers=12, d_model=768, d_kv=64, d_ff=3072,
                   num_heads=12)),
]}

# (layers, hidden, heads, ffn) for the shrunken presets
_PRESETS = {"tiny": (2, 64, 2, 128), "small": (4, 256, 4, 1024)}


def size_config(name: str, size: str) -> dict:
    """The transformers config keywords of ``name`` at ``size`` (without vocab adjustments)."""
    info = MODELS[name]
    cfg = dict(info.base)
    if size == "base":
        return cfg
    layers, hidden, heads, ffn = _PRESETS[size]
    fam = info.family
    cfg["vocab_size"] = SHIPPED_VOCAB + 8
    if fam in ("bert", "roberta", "xlm-roberta", "albert"):
        cfg.update(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads, intermediate_size=ffn)
        if fam == "albert":
            cfg["embedding_size"] = min(128, hidden)
    elif fam == "distilbert":
        cfg.update(n_layers=layers, dim=hidden, n_heads=heads, hidden_dim=ffn)
    elif fam == "gpt2":
        cfg.update(n_layer=layers, n_embd=hidden, n_head=heads, n_positions=512)
    elif fam == "t5":
        cfg.update(num_layers=layers, num_decoder_layers=layers, d_model=hidden, d_kv=hidden // heads, d_ff=ffn,
                   num_heads=heads)
    return cfg


# RoBERTa-style position ids start after the padding index: pad_token_id + 1 positions are never used
PADDING_OFFSET_TYPES = ("roberta", "xlm-roberta", "camembert")


def usable_positions(model_type: str, positions: int | None, pad_token_id: int | None = 1) -> int | None:
    """The longest sequence ``positions`` learned position embeddings allow (None: no limit, e.g. T5)."""
    if positions is None:
        return None
    return positions - (pad_token_id or 0) - 1 if model_type in PADDING_OFFSET_TYPES else positions


def max_positions(name: str, size: str) -> int | None:
    """The longest sequence the model's position embeddings allow (None: relative positions, T5)."""
    cfg = size_config(name, size)
    positions = cfg["n_positions"] if MODELS[name].family == "gpt2" else cfg.get("max_position_embeddings")
    return usable_positions(MODELS[name].family, positions, cfg.get("pad_token_id", 1))


def dims(name: str, size: str) -> dict:
    """Uniform view of the dimensions: layers, hidden, heads, ffn, vocab (for FLOPs and tables)."""
    cfg = size_config(name, size)
    fam = MODELS[name].family
    if fam == "distilbert":
        return dict(layers=cfg["n_layers"], hidden=cfg["dim"], heads=cfg["n_heads"], ffn=cfg["hidden_dim"],
                    vocab=cfg["vocab_size"])
    if fam == "gpt2":
        return dict(layers=cfg["n_layer"], hidden=cfg["n_embd"], heads=cfg["n_head"], ffn=4 * cfg["n_embd"],
                    vocab=cfg["vocab_size"])
    if fam == "t5":
        return dict(layers=cfg["num_layers"] + cfg["num_decoder_layers"], hidden=cfg["d_model"],
                    heads=cfg["num_heads"], ffn=cfg["d_ff"], vocab=cfg["vocab_size"])
    return dict(layers=cfg["num_hidden_layers"], hidden=cfg["hidden_size"], heads=cfg["num_attention_heads"],
                ffn=cfg["intermediate_size"], vocab=cfg["vocab_size"])


def approx_params(name: str, size: str) -> int:
    """Approximate parameter count from the dimensions (embeddings + transformer blocks)."""
    d = dims(name, size)
    h, f, L = d["hidden"], d["ffn"], d["layers"]
    block = 4 * h * h + 2 * h * f + 9 * h + f
    if MODELS[name].family == "albert":
        e = size_config(name, size)["embedding_size"]
        return d["vocab"] * e + e * h + block  # ALBERT shares one block across its layers
    if MODELS[name].family == "t5":
        block += 2 * h * h  # the decoder's cross-attention, averaged over both stacks
    return d["vocab"] * h + L * block


def training_bytes_floor(name: str, size: str, seq_len: int, precision: str) -> tuple[int, int]:
    """(fixed, per sample): a floor under the memory one training step of a catalog model takes, in bytes. Fixed: the
    fp32 weights, their gradients and AdamW's two states (16 bytes a parameter; autocast keeps fp32 masters). Per
    sample: each layer's input kept for the backward (two activations a token a layer, in the compute precision) and,
    for a causal LM, the logits over the vocabulary in fp32. Attention, the feed-forward's inner activations and the
    allocator's slack come on top: a batch whose floor exceeds the memory cannot fit; one under it may not either."""
    d = dims(name, size)
    act = 4 if precision == "fp32" else 2
    per_token = 2 * d["layers"] * d["hidden"] * act + (4 * d["vocab"] if MODELS[name].task == "causal-lm" else 0)
    return 16 * approx_params(name, size), per_token * seq_len


def models_table() -> list[dict]:
    """One row per catalog model and size: name, family, task, size, layers, hidden, approx params."""
    rows = []
    for name, info in MODELS.items():
        for size in SIZES:
            d = dims(name, size)
            rows.append(dict(model=name, family=info.family, task=info.task, size=size, layers=d["layers"],
                             hidden=d["hidden"], heads=d["heads"], params=approx_params(name, size),
                             max_seq_len=max_positions(name, size)))
    return rows
