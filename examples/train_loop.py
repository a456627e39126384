"""A plain PyTorch training loop, measured by tcbench with two added lines (marked "tcbench:").

Tiny GPT-2 (2 layers × 64, random weights built from its configuration: nothing is downloaded) learns the
shipped reviews (data/task/) as a language model, so its loss falls from ≈ 8.3 within a few dozen steps.

    python examples/train_loop.py --steps 40                          # on its own: eager, prints its loss
    tcbench compare-script examples/train_loop.py --backends eager,inductor --steps 30 -- --batch-size 8

Under ``compare-script`` each run is a process of its own with ``TCBENCH_BACKEND`` set: the first tcbench
line prepares the model and optimizer for that backend (``torch.compile`` for inductor, the XLA device for
xla), the second records each step and stops the loop at the job's ``--steps``. Run on its own, without
tcbench's environment, both lines do nothing.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import tcbench  # import it first: a job's process then dies with tcbench's (and nothing heavy is imported)
import torch
from tokenizers import Tokenizer
from transformers import GPT2Config, GPT2LMHeadModel

DATA = Path(__file__).resolve().parent.parent / "data" / "task"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=100, help="optimizer steps (a tcbench job stops at its own --steps)")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def batches(batch_size: int, seq_len: int, seed: int):
    """Endless batches of ``[BOS] review [EOS]`` padded to ``seq_len`` (static shapes: one compile)."""
    tok = Tokenizer.from_file(str(DATA / "tokenizer.json"))
    pad, bos, eos = (tok.token_to_id(t) for t in ("[PAD]", "[BOS]", "[EOS]"))
    texts = [json.loads(line)["text"] for line in open(DATA / "train.jsonl", encoding="utf-8")]
    ids = torch.full((len(texts), seq_len), pad, dtype=torch.long)
    for row, enc in zip(ids, tok.encode_batch(texts, add_special_tokens=False)):
        seq = [bos, *enc.ids, eos][:seq_len]
        row[: len(seq)] = torch.tensor(seq)
    return _stream(ids, pad, batch_size, seed)


def _stream(ids: torch.Tensor, pad: int, batch_size: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    while True:
        for idx in torch.randperm(len(ids), generator=g).split(batch_size):
            if len(idx) == batch_size:
                x = ids[idx]
                yield {"input_ids": x, "attention_mask": (x != pad).long(), "labels": x.masked_fill(x == pad, -100)}


def build(args: argparse.Namespace) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(args.seed)
    cfg = GPT2Config(vocab_size=4104, n_positions=512, n_layer=2, n_embd=64, n_head=2, bos_token_id=5,
                     eos_token_id=6, pad_token_id=0)
    model = GPT2LMHeadModel(cfg).train()
    return model, torch.optim.AdamW(model.parameters(), lr=args.lr)


def train(args: argparse.Namespace) -> float:
    """The loop; prints and returns its wall time in seconds."""
    model, optimizer = build(args)
    model, optimizer = tcbench.compile_for_backend(model, optimizer)   # tcbench: eager, torch.compile or XLA
    data = batches(args.batch_size, args.seq_len, args.seed)
    done, loss, start = 0, None, time.perf_counter()
    with tcbench.track() as t:                                         # tcbench: measure this loop
        for _ in range(args.steps):
            batch = {k: v.to(tcbench.device()) for k, v in next(data).items()}
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            done += 1
            t.step(loss, batch)   # syncs the device (XLA: ends the step's graph), records the step; stops at the cap
    took = time.perf_counter() - start
    print(f"train_loop: {done} steps in {took:.3f} s, last loss {loss.item():.4f}", flush=True)
    return took


if __name__ == "__main__":
    train(parse())
