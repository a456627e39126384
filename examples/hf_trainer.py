"""A Hugging Face ``Trainer`` fine-tuning script, measured by tcbench with two added lines (marked "tcbench:").

A tiny BERT (2 layers × 64, or ``--size small``: 4 × 256; random weights built from its configuration: nothing is
downloaded) learns the shipped sentiment-like reviews (data/task/, tokenized with the shipped tokenizer) as sequence
classification.

    TCBENCH_BACKEND=eager python examples/hf_trainer.py --max-steps 40   # on its own, natively; prints its loss
    tcbench compare-script examples/hf_trainer.py --backends eager,inductor --steps 30 -- --batch-size 8

Under ``compare-script`` each run is a process of its own with ``TCBENCH_BACKEND`` set: ``training_args``
switches the Trainer's compiler for that backend (``torch_compile`` with Inductor; the XLA device for xla;
off for the eager baseline) and ``TcbenchCallback`` records every optimizer step and stops the Trainer at the
job's ``--steps``. Run on its own, the callback does nothing and ``training_args`` only applies a
``TCBENCH_BACKEND`` set by hand (without it, transformers picks its own device: XLA whenever torch_xla is
installed, where the default fused AdamW cannot run).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import tcbench.hf  # before transformers: a tcbench job's XLA switch (USE_TORCH_XLA) is read when it is imported
import torch
from tokenizers import Tokenizer
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

DATA = Path(__file__).resolve().parent.parent / "data" / "task"
SIZES = {"tiny": (2, 64, 2, 128), "small": (4, 256, 4, 1024)}   # layers, hidden, heads, intermediate


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--max-steps", type=int, default=100, help="optimizer steps (a tcbench job stops at its own --steps)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", choices=sorted(SIZES), default="tiny",
                   help="tiny: 2 layers × 64; small: 4 layers × 256 (tcbench's bert-base-cased sizes)")
    p.add_argument("--output-dir", default=None, help="the Trainer's output folder (default: a temporary one)")
    return p.parse_args(argv)


class Reviews(torch.utils.data.Dataset):
    """``[CLS] review [SEP]`` padded to ``seq_len`` (static shapes: one compile), with its 0/1 label."""

    def __init__(self, seq_len: int) -> None:
        tok = Tokenizer.from_file(str(DATA / "tokenizer.json"))
        pad, cls, sep = (tok.token_to_id(t) for t in ("[PAD]", "[CLS]", "[SEP]"))
        rows = [json.loads(line) for line in open(DATA / "train.jsonl", encoding="utf-8")]
        self.ids = torch.full((len(rows), seq_len), pad, dtype=torch.long)
        for row, enc in zip(self.ids, tok.encode_batch([r["text"] for r in rows], add_special_tokens=False)):
            seq = [cls, *enc.ids[: seq_len - 2], sep]
            row[: len(seq)] = torch.tensor(seq)
        self.mask = (self.ids != pad).long()
        self.labels = torch.tensor([r["label"] for r in rows])

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "attention_mask": self.mask[i], "labels": self.labels[i]}


def main(argv: list[str] | None = None) -> float:
    """Fine-tune; prints and returns the Trainer's training time in seconds."""
    a = parse(argv)
    torch.manual_seed(a.seed)
    layers, hidden, heads, inner = SIZES[a.size]
    model = BertForSequenceClassification(BertConfig(vocab_size=4104, hidden_size=hidden, num_hidden_layers=layers,
                                                     num_attention_heads=heads, intermediate_size=inner, num_labels=2))
    data = Reviews(a.seq_len)
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(output_dir=a.output_dir or tmp, max_steps=a.max_steps,
                                 per_device_train_batch_size=a.batch_size, learning_rate=a.lr, seed=a.seed,
                                 logging_steps=10, save_strategy="no", report_to=[], disable_tqdm=True,
                                 dataloader_num_workers=0)
        args = tcbench.hf.training_args(args)                                  # tcbench: the job's compiler
        trainer = Trainer(model=model, args=args, train_dataset=data,
                          callbacks=[tcbench.hf.TcbenchCallback(seq_len=a.seq_len)])   # tcbench: measure it
        start = time.perf_counter()
        out = trainer.train()
        took = time.perf_counter() - start
    print(f"hf_trainer: {out.global_step} steps in {took:.3f} s, training loss {out.training_loss:.4f}", flush=True)
    return took


if __name__ == "__main__":
    main()
