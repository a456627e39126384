"""The time-to-quality projection checked against a measured long run (issue 45, part 3).

    .venv/bin/python benchmarks/horizon_check.py                    # tiny GPT-2, 3 seeds, 10× horizon (~10 min)
    .venv/bin/python benchmarks/horizon_check.py --model bert-base-cased:small --steps 64 --lr 5e-4
                                                                    # -> benchmarks/horizon_check_bert-base-cased.md
    .venv/bin/python benchmarks/horizon_check.py --seeds 5          # -> benchmarks/horizon_check_5seeds.md

1. A short study: the reference (``--model``, tiny GPT-2 by default, on eager, ``--steps`` steps) and two
   candidates, compiled at the same batch (its compile against its faster step) and native at twice the batch with
   twice the learning rate (its samples ratio against its throughput). Its projection to ``--factor`` × the
   reference's steps (``QualityResult.projection``).
2. The same study at that length, run end to end: the reference trains ``--factor`` × the steps, its loss there is
   the target, every candidate runs to it (evaluated every 64 samples in both studies, so that neither's time is
   rounded up to a coarse evaluation grid).
3. Each candidate's measured speedup (seed-paired, 95 %) against the projected one: the check is that the measured
   point lies inside the projection's interval. The compile cache is warmed first, so both studies compile warm.

Writes benchmarks/horizon_check.md and .json (for another model: horizon_check_<model>.md).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import tcbench as tc  # noqa: E402
from tcbench.tuning.quality.projection import still_falling  # noqa: E402



def _ci(p, lo, hi) -> str:
    if p is None or p != p:
        return "—"
    if lo is None or lo != lo:
        return f"{p:.2f}×"
    return f"{p:.2f}× ({lo:.2f}–{hi:.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40,
                    help="the short study's reference steps (default 40; a multiple of 8: evaluated every 64 samples)")
    ap.add_argument("--factor", type=int, default=10, help="the horizon, in short studies (default 10)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--model", default="gpt2:tiny", help="model:size (default gpt2:tiny)")
    ap.add_argument("--lr", type=float, default=2e-3)
    args = ap.parse_args()
    if args.steps < 8 or args.steps % 8 or args.factor < 2 or args.seeds < 3 or args.model.count(":") != 1:
        ap.error("--steps: a multiple of 8; --factor: at least 2; --seeds: at least 3; --model: model:size")
    model, size = args.model.split(":")
    out = HERE / (("horizon_check" if args.model == "gpt2:tiny" else f"horizon_check_{model}")
                  + ("" if args.seeds == 3 else f"_{args.seeds}seeds"))
    spec = tc.JobSpec(model=model, size=size, batch_size=8, seq_len=64, steps=args.steps, warmup_steps=2,
                      lr=args.lr, dropout=0.0, threads=1)
    tc.run(spec.replace(backend="inductor", steps=6))   # the compile cache warm for both studies

    def candidates(s: tc.JobSpec) -> list:
        return [tc.Candidate("inductor", s.replace(backend="inductor")),
                tc.Candidate("native@16, lr×2", s.replace(batch_size=16, lr=2 * s.lr))]

    horizon = args.factor * args.steps
    t0 = time.monotonic()
    short = tc.time_to_quality(spec, candidates(spec), seeds=args.seeds, eval_batches=4, eval_every_samples=64,
                               horizon_steps=horizon)
    short_s = time.monotonic() - t0
    projected = short.projection(horizon).set_index("label")
    print("\n".join(short.projection_sentences()), flush=True)
    long_spec = spec.replace(steps=horizon)
    t0 = time.monotonic()
    long = tc.time_to_quality(long_spec, candidates(long_spec), seeds=args.seeds, eval_batches=4,
                              eval_every_samples=64)
    long_s = time.monotonic() - t0
    measured = long.table().set_index("candidate")
    rows = []
    for label in projected.index:
        p, m = projected.loc[label], measured.loc[label]
        inside = (p.low is not None and p.low == p.low and m.speedup == m.speedup
                  and p.low <= m.speedup <= p.high)
        rows.append(dict(label=label, projected=(p.speedup, p.low, p.high), measured=(m.speedup, m.speedup_low,
                                                                                      m.speedup_high),
                         projected_time_s=p.time_s, measured_time_s=m.time_to_target_s,
                         break_even_steps=None if p.break_even_steps != p.break_even_steps else p.break_even_steps,
                         break_even_kind=p.break_even_kind, inside=bool(inside)))
        print(f"{label}: projected {_ci(*rows[-1]['projected'])}, measured {_ci(*rows[-1]['measured'])}: "
              f"{'inside' if inside else 'OUTSIDE'}", flush=True)
    data = dict(date=time.strftime("%Y-%m-%d"), machine=f"{platform.machine()}, {platform.processor() or ''}",
                steps=args.steps, horizon=horizon, seeds=args.seeds,
                short=dict(comparison_id=short.comparison_id, seconds=short_s, target=short.target),
                long=dict(comparison_id=long.comparison_id, seconds=long_s, target=long.target), rows=rows,
                sentences=short.projection_sentences(), falling=dataclasses.asdict(still_falling(short)))
    Path(str(out) + ".json").write_text(json.dumps(data, indent=1, default=str))
    md = [f"Measured {data['date']}; {model} ({size}), batch 8, seq 64, lr {args.lr:g}, 1 thread, dropout 0, "
          f"{args.seeds} seeds; compile cache warm.", "",
          f"`.venv/bin/python benchmarks/horizon_check.py --model {args.model} --steps {args.steps} --factor "
          f"{args.factor} --seeds {args.seeds} --lr {args.lr:g}`", "",
          f"Short study {short.comparison_id} ({args.steps} reference steps, {short_s / 60:.1f} min), projected to "
          f"{horizon} steps; long study {long.comparison_id} ({horizon} reference steps, run end to end, "
          f"{long_s / 60:.1f} min; target {long.target:.4g}).", "",
          "| candidate | projected speedup (95 %) | measured speedup (95 %) | measured inside the projection | "
          "projected / measured time s | break-even |", "|---|---|---|---|---|---|"]
    for r in rows:
        even = (f"{r['break_even_steps']:,.0f} steps ({r['break_even_kind']})" if r["break_even_steps"] is not None
                else r["break_even_kind"])
        md.append(f"| {r['label']} | {_ci(*r['projected'])} | {_ci(*r['measured'])} | "
                  f"{'yes' if r['inside'] else '**no**'} | {r['projected_time_s']:.3g} / {r['measured_time_s']:.3g} | "
                  f"{even} |")
    f = data["falling"]
    md += ["", "The reference's held-out loss over the second half of its short-study runs (`still_falling`): "
           + ("too few evaluations to tell" if f["slope"] is None else
              f"{f['slope']:+.3g} per doubling of the steps ({f['low']:+.3g} to {f['high']:+.3g}, {f['seeds']} seeds): "
              + ("still falling, the premise holds" if f["high"] < 0 else
                 "not measurably falling, so the projected times are an upper bound"))]
    md += ["", "The short study's sentences:", ""] + [f"- {s}" for s in data["sentences"]]
    Path(str(out) + ".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
