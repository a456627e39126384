"""The learning rate's premise, checked (issue 38, part 2): with lr0 = 5e-4 at batch 8 for tiny GPT-2, does
``tc.check_lr`` flag it, and does the prediction from its re-centred rate land within 0.2 of the grid's best at
2–16× the batch?

    .venv/bin/python benchmarks/lr_premise.py                 # k = 2, 4, 8 (~10 min on 2 cores), then --ks 16
    .venv/bin/python benchmarks/lr_premise.py --ks 2,4,8,16
    .venv/bin/python benchmarks/lr_premise.py --rewrite       # only rewrite lr_premise.md from lr_premise.json

The protocol is ``benchmarks/lr_transfer.py``'s (tiny GPT-2, seq 64, eager, one thread, no dropout, seed 0, equal
samples at every batch: 1,280, held-out loss over 8 batches), with B0 = 8 and an untuned lr0:

1. **The check**: ``tc.check_lr`` at (B0 = 8, lr0 = 5e-4, 160 steps), its defaults (×½, 1, 2; 3 seeds; up to 2 more
   factors beyond the edge) → held or not, and the re-centred rate.
2. **The noise scale** at lr0 and at the re-centred rate (``tc.noise_scale``, one job each).
3. **The grid at each B1 = k·8**: lr_transfer's grid at that batch and step count (its B0 = 4 at 320 steps makes
   the same 1,280 samples, so the jobs are the same: they are read from ``lr_transfer.json``, and each k's best grid
   point is trained again here to show the cache still holds); a batch lr_transfer has not run is gridded here the
   same way (9 log-spaced rates from 2.83e-3/2 to 2.83e-3·(B1/4)·2).
4. **Each prediction** trained at its rate: the noise-scale prediction from lr0 unchecked, and from the re-centred
   rate (``tc.predict_lr``'s ``check_premise=True`` path); regret = its held-out loss − the grid's best (one seed:
   lr_transfer's own figures put one seed's spread between nearby rates at a few hundredths for GPT-2).

Every job is cached in lr_premise.json as it finishes, so an interrupted run resumes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import tcbench as tc  # noqa: E402

OUT = {"json": HERE / "lr_premise.json", "md": HERE / "lr_premise.md"}
B0, LR0, STEPS, TRANSFER_LR0 = 8, 5e-4, 160, 0.00282843


def _transfer():
    """benchmarks/lr_transfer.py, loaded as a module (its job cache, grid and loss helpers)."""
    spec = importlib.util.spec_from_file_location("lr_transfer", HERE / "lr_transfer.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.OUT.update(json=OUT["json"], md=HERE / "lr_transfer.md")   # its _job saves the cache it is given: ours
    return mod


def _load(lt) -> dict:
    data = json.loads(OUT["json"].read_text()) if OUT["json"].exists() else {"jobs": {}}
    path = HERE / "lr_transfer.json"
    transfer = json.loads(path.read_text())["jobs"] if path.exists() else {}
    for key, job in transfer.items():   # the same jobs (same fields, same samples): lr_transfer's cache lends them
        if key.startswith("gpt2|") and key.count("|") == 5:
            data["jobs"].setdefault(key, {**job, "from": "lr_transfer.json"})
    return data


def _save(data: dict) -> None:
    OUT["json"].write_text(json.dumps(data, indent=1, default=str))


def run(a: argparse.Namespace, data: dict, store: tc.Store, lt) -> None:
    base = tc.JobSpec(model="gpt2", size="tiny", seq_len=64, batch_size=B0, steps=STEPS, warmup_steps=2,
                      eval_batches=8, threads=1, dropout=0.0, seed=0, stall_s=600.0, lr=LR0)
    if "premise" not in data:
        t0 = time.monotonic()
        p = tc.check_lr(base, store=store)
        data["premise"] = {"verdict": p.verdict, "held": p.held, "recentred_lr": p.recentred_lr, "best_lr": p.best_lr,
                           "factors": list(p.factors), "comparison_id": p.comparison_id, "jobs": len(p.runs),
                           "wall_s": round(time.monotonic() - t0, 1),
                           "table": json.loads(p.table().to_json(orient="records"))}
        _save(data)
    pr = data["premise"]
    print(f"premise: {pr['verdict']}", flush=True)
    noise = data.setdefault("noise", {})
    for name, lr in (("lr0", LR0), ("recentred", pr["recentred_lr"])):
        if name not in noise:
            t0 = time.monotonic()
            ns = tc.noise_scale(base.replace(lr=lr), micro_batches=2, store=store)
            noise[name] = {**ns.to_dict(), "lr": lr, "wall_s": round(time.monotonic() - t0, 1)}
            _save(data)
    ns = {n: tc.NoiseScale.from_dict({k: v for k, v in d.items() if k not in ("lr", "wall_s")})
          for n, d in noise.items()}
    rows = data.setdefault("per_k", {})
    for k in a.ks:
        b1, steps1 = B0 * k, STEPS // k
        spec1 = base.replace(batch_size=b1, steps=steps1, warmup_steps=min(base.warmup_steps, steps1 - 1))
        grid = lt._grid(TRANSFER_LR0 / 2, TRANSFER_LR0 * (b1 // 4) * 2)
        gjobs = [(lr, lt._job(data, spec1.replace(lr=lr), store)) for lr in grid]
        lr_star, star = min(gjobs, key=lambda p: lt._loss(p[1]))
        row = {"k": k, "b1": b1, "steps": steps1, "lr_star": lr_star, "l_star": lt._loss(star),
               "l_star_se": star.get("eval_loss_se"), "grid_from": star.get("from", "here")}
        again = rows.get(str(k), {}).get("l_star_again")
        if again is None:   # the cached best, trained again now
            res = tc.run(spec1.replace(lr=lr_star), store=store, label="lr-premise-repro")
            again = res.extra.eval_loss if res.status == "ok" else None
        row["l_star_again"] = again
        for name, lr0 in (("unchecked", LR0), ("recentred", pr["recentred_lr"])):
            pred = tc.predict_lr(base.replace(lr=lr0), b1, noise=ns["lr0" if name == "unchecked" else "recentred"])
            job = lt._job(data, spec1.replace(lr=lt._on_grid(pred.lr, grid) or float(f"{pred.lr:.6g}")), store)
            row[name] = {"lr0": lr0, "lr": pred.lr, "loss": lt._loss(job), "regret": lt._loss(job) - row["l_star"],
                         "abs_log": abs(math.log(pred.lr / lr_star))}
        rows[str(k)] = row
        _save(data)
        print(f"k={k}: lr* {lr_star:.3g} (L* {row['l_star']:.4f}, again {again}); unchecked "
              f"{row['unchecked']['lr']:.3g} regret {row['unchecked']['regret']:+.3f}; re-centred "
              f"{row['recentred']['lr']:.3g} regret {row['recentred']['regret']:+.3f}", flush=True)


NOTES = [   # what the run recorded in lr_premise.json shows (rewritten by hand when it is run again)
    "## Reading", "",
    "- **The check flags lr0 = 5e-4**, decisively: ×2 is 1.15 (1.12–1.18) lower in held-out loss, ×4 1.75 "
    "(1.66–1.85), paired over 3 seeds; ×½ is 1.06 (0.80–1.32) higher. It ran ×4 and ×8 beyond the edge and re-centred "
    "on 2.51e-3 (a parabola through ×2, ×4, ×8). lr_transfer's one-seed grid at the same batch and samples has its "
    "best at 3.08e-3; ×8's seeds spread widely (2.30, 3.32, 2.41), which pulls the parabola down.",
    "- **An untuned lr0 also corrupts the noise scale**: B_simple is 4.9 samples measured at lr0, 24.9 at the "
    "re-centred rate (lr_transfer measured 22.1 at its tuned lr0). From lr0 the surge form then puts every B1 far "
    "beyond B_noise and *lowers* the rate as the batch grows: regrets +2.85 … +3.36 (the issue's \"2.54\" was not "
    "found in any file of the repository; this is the same measurement, redone).",
    "- **Re-centred, the target holds at k = 2 and 4, not at 8 and 16**: regret +0.000 and +0.131, then +0.368 and "
    "+1.610. At B1 = 64 and 128 (20 and 10 steps) the grid's best rates, 0.019 and 0.029, are 7–14× the re-centred "
    "prediction: the surge form lowers the rate beyond B_noise ≈ 25, while runs this short reward large rates. That "
    "is the prediction's own limit at these horizons, not the premise's; lr_transfer.md's B1 = 64 grid is also "
    "ragged at one seed (2.38e-3 → 5.14, 3.43e-3 → 4.61, 4e-3 → 4.86).",
    "- The grid jobs are lr_transfer.json's (same fields, same samples); each k's best was trained again here: the "
    "same loss to 1e-6 at k = 2, 4, 16, and 4.6190 against 4.6131 at k = 8. Regrets are one seed each; only the "
    "check carries intervals.", ""]


def _f(v, fmt="{:.3g}") -> str:
    return "—" if v is None or (isinstance(v, float) and not math.isfinite(v)) else fmt.format(v)


def write(data: dict) -> None:
    pr = data.get("premise")
    lines = ["# The learning rate's premise, checked: tiny GPT-2, lr0 = 5e-4 at batch 8", "",
             "`.venv/bin/python benchmarks/lr_premise.py --ks 2,4,8,16` (protocol: its docstring; lr_transfer's, "
             "with B0 = 8, 160 steps, 1,280 samples at every batch, held-out loss over 8 batches, eager, 1 thread, "
             "seed 0). Regret = the held-out loss at the predicted rate − the grid's best (one seed each).", ""]
    if pr:
        lines += ["## The check (`tc.check_lr`, defaults: ×½, 1, 2 over 3 seeds, extended beyond the edge)", "",
                  f"**{pr['verdict']}**", "",
                  f"{pr['jobs']} jobs of 160 steps, {pr['wall_s']:.0f} s (comparison {pr['comparison_id']}).", "",
                  "| factor | lr | mean held-out loss (3 seeds) | loss − lr0's, paired by seed (95 % interval) | "
                  "call |", "|---|---|---|---|---|"]
        for r in pr["table"]:
            diff = ("—" if r["diff"] is None else f"{r['diff']:+.3f} ({_f(r['diff_low'], '{:+.3f}')} … "
                    f"{_f(r['diff_high'], '{:+.3f}')})")
            lines.append(f"| ×{r['factor']:g} | {r['lr']:.3g} | {_f(r['mean_loss'], '{:.4f}')} | {diff} | "
                         f"{r['vs_lr0']} |")
        noise = data.get("noise", {})
        lines += ["", "Noise scale (B_simple, 95 % interval): " + "; ".join(
            f"at {n} lr {d['lr']:.3g}: {_f(d.get('b_simple'))} ({_f(d.get('low'))}–{_f(d.get('high'))})"
            for n, d in noise.items()) + ".", ""]
    per_k = sorted(data.get("per_k", {}).values(), key=lambda r: r["k"])
    if per_k:
        lines += ["## The prediction at 2–16× the batch, against the grid", "",
                  "| k | B1 | steps | lr* (grid) | L* ± SE | L* trained again | unchecked: lr, regret | "
                  "re-centred: lr, regret |", "|---|---|---|---|---|---|---|---|"]
        for r in per_k:
            u, c = r["unchecked"], r["recentred"]
            lines.append(f"| {r['k']} | {r['b1']} | {r['steps']} | {r['lr_star']:.3g} | {r['l_star']:.4f} ± "
                         f"{_f(r.get('l_star_se'), '{:.4f}')} | {_f(r.get('l_star_again'), '{:.4f}')} | "
                         f"{u['lr']:.3g}, {u['regret']:+.3f} | {c['lr']:.3g}, {c['regret']:+.3f} |")
        med = {n: statistics.median(r[n]["regret"] for r in per_k) for n in ("unchecked", "recentred")}
        worst = max(r["recentred"]["regret"] for r in per_k)
        lines += ["", f"Median regret over k: unchecked {med['unchecked']:+.3f}, re-centred {med['recentred']:+.3f}; "
                  f"the re-centred prediction's worst {worst:+.3f} (target: within 0.2 at every k: "
                  f"{'met' if worst <= 0.2 else 'not met'}).", ""]
        lines += NOTES
    OUT["md"].write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ks", default="2,4,8")
    p.add_argument("--store", default=None, help="the tcbench store for the jobs (default: TCBENCH_HOME's)")
    p.add_argument("--rewrite", action="store_true", help="only rewrite lr_premise.md from lr_premise.json")
    a = p.parse_args(argv)
    a.ks = [int(x) for x in a.ks.split(",")]
    lt = _transfer()
    data = _load(lt)
    if not a.rewrite:
        run(a, data, tc.Store(a.store) if a.store else tc.Store(), lt)
    write(data)
    print(OUT["md"].read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
