"""The harness's floor: the model a tcbench job trains, in a plain hand-written loop with ``torch.compile``.

What a nanoGPT-style script does, nothing more: the model built from its configuration, ``torch.compile(model)``,
torch's default AdamW, ``zero_grad(set_to_none=True)``, static batches. ``tcbench.track()`` only records the steps (a
script job of backend eager: tcbench compiles nothing in it); ``--no-compile`` leaves the model eager.
``--trainer`` trains the same model on the same batches with Hugging Face's ``Trainer`` instead (as
``examples/hf_trainer.py`` does, for GPT-2 too; a script job of backend inductor: ``torch_compile=True``).
``benchmarks/vs_trainer.py`` runs it beside tcbench's own Inductor job.

    .venv/bin/python benchmarks/plain_loop.py --model bert --size small --seq-len 128 --steps 20
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import tcbench  # first: the job's process dies with tcbench's
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import hf_trainer  # noqa: E402  (the Trainer example's data and BERT sizes: the same batches)
import train_loop  # noqa: E402  (the plain-loop example's GPT-2 data)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", choices=["bert", "gpt2"], default="bert")
    p.add_argument("--size", choices=sorted(hf_trainer.SIZES), default="tiny")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--trainer", action="store_true", help="train with HF Trainer (tcbench.hf's two lines)")
    return p.parse_args(argv)


def build(a: argparse.Namespace):
    """(model, endless batches): BERT sequence classification on the reviews, or tiny GPT-2 as a language model."""
    torch.manual_seed(a.seed)
    if a.model == "gpt2":
        model, _ = train_loop.build(argparse.Namespace(seed=a.seed, lr=a.lr))
        return model, train_loop.batches(a.batch_size, a.seq_len, a.seed)
    from transformers import BertConfig, BertForSequenceClassification

    layers, hidden, heads, inner = hf_trainer.SIZES[a.size]
    model = BertForSequenceClassification(BertConfig(vocab_size=4104, hidden_size=hidden, num_hidden_layers=layers,
                                                     num_attention_heads=heads, intermediate_size=inner, num_labels=2))
    data = hf_trainer.Reviews(a.seq_len)
    g = torch.Generator().manual_seed(a.seed)

    def stream():
        while True:
            for idx in torch.randperm(len(data), generator=g).split(a.batch_size):
                if len(idx) == a.batch_size:
                    yield {"input_ids": data.ids[idx], "attention_mask": data.mask[idx], "labels": data.labels[idx]}

    return model.train(), stream()


class _Batches(torch.utils.data.Dataset):
    """The loop's batches, one sample at a time, in the loop's order (the Trainer batches them again, unshuffled)."""

    def __init__(self, data, batches: int) -> None:
        self.rows = [{k: v[i] for k, v in batch.items()} for batch in (next(data) for _ in range(batches))
                     for i in range(len(batch["input_ids"]))]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        return self.rows[i]


def trainer(a: argparse.Namespace, model, data) -> float:
    """The same model and batches through ``Trainer(torch_compile=...)``, as tcbench's Trainer example runs it."""
    import tempfile

    import tcbench.hf
    from transformers import Trainer, TrainingArguments

    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(output_dir=tmp, max_steps=a.steps, per_device_train_batch_size=a.batch_size,
                                 learning_rate=a.lr, seed=a.seed, logging_steps=10, save_strategy="no", report_to=[],
                                 disable_tqdm=True, dataloader_num_workers=0)
        args = tcbench.hf.training_args(args)
        t = Trainer(model=model, args=args, train_dataset=_Batches(data, a.steps),
                    callbacks=[tcbench.hf.TcbenchCallback(seq_len=a.seq_len)])
        t._get_train_sampler = lambda *_: torch.utils.data.SequentialSampler(t.train_dataset)   # the loop's order
        start = time.perf_counter()
        t.train()
        return time.perf_counter() - start


def main(argv: list[str] | None = None) -> float:
    a = parse(argv)
    model, data = build(a)
    if a.trainer:
        took = trainer(a, model, data)
        print(f"plain_loop (Trainer): {a.model} {a.size}, {took:.3f} s", flush=True)
        return took
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr)
    step_model = model if a.no_compile else torch.compile(model)
    start = time.perf_counter()
    with tcbench.track(model) as t:
        for _ in range(a.steps):
            loss = step_model(**next(data)).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            t.step(loss)
    took = time.perf_counter() - start
    print(f"plain_loop: {a.model} {a.size}, {took:.3f} s", flush=True)
    return took


if __name__ == "__main__":
    main()
