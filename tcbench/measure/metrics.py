"""Figures from step records, exactly as the README's measurement protocol defines them.

Per job: median steady step, its spread (IQR, CV), the share of wall time the job had the CPU, a
``noisy`` flag with its reason, compile latency, peak memory, MFU (never above 1). Per pair of
jobs: the verdict from the speedup's 95 % interval (``tcbench.measure.interval``: a t-interval over rounds),
break-even steps as a range, loss parity judged only when the native job learned, the drift between rounds.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Sequence

from tcbench.core.results import JobFigures, StepRecord
from tcbench.core.fmt import fmt_between, fmt_ratio   # the verdict sentences' ratios
from tcbench.measure.interval import fast_step

# -- noise: when a job's steady steps cannot be trusted ---------------------------------------------
NOISY_WAIT_SHARE = 0.10     # threads runnable but waiting for a CPU more than 10 % of the steady time
NOISY_CPU_SHARE = 0.75      # the job had the CPU less than 75 % of its wall time (x threads)
NOISY_CV = 0.5              # steady steps scatter: coefficient of variation above 50 % (and a robust one above 25 %)
NOISY_STEAL = 0.10          # the hypervisor took more than 10 % of the machine's CPU time (steal) while the job ran
MIN_STEADY = 3              # fewer steady steps than this: no spread, so no verdict
SHARED_LIMIT = 0.25         # lock-step rounds: a machine's disturbance up to this share (wait, others, steal) and a
                            # CPU share of at least NOISY_CPU_SHARE reach both jobs of a round alike (shared_noise)

# -- verdicts ------------------------------------------------------------------------------------------
EQUIVALENCE = 0.05          # the equivalence margin when none is asked: an interval inside [1/1.05, 1.05] is "no
                            # measurable difference"; one that contains 1 but reaches past it is "inconclusive"
VERDICT_KINDS = ("baseline", "faster", "slower", "no measurable difference", "inconclusive")
DRIFT = 0.10               # a job's median step moved more than 10 % between rounds: the machine's speed drifted

# -- loss parity -----------------------------------------------------------------------------------------
LEARN_MIN_DROP = 0.02       # the native loss must fall by > 2 % of its start and > 3 noise units of its windows
PARITY_DROP_SHARE = 0.2     # the compiled job's last window within 20 % of the native drop (or 3 noise units)
EARLY_STEPS = 3             # with dropout=0: the first 3 logged losses agree within a tolerance per precision
EARLY_RTOL = {"fp32": 5e-3, "bf16": 5e-2, "fp16": 5e-2}

WARN_SPEEDUP = 0.95
WARN_COMPILE_S = 120.0
WARN_MEMORY_RATIO = 0.9


def steady(records: Sequence[StepRecord]) -> list[StepRecord]:
    return [r for r in records if not r.warmup]


def _scatter(cv: float | None, iqr: float | None, med: float | None) -> bool:
    """Whether steady steps scatter: one slow outlier (a GC pause) moves the CV but not the median, so the robust
    spread (IQR ÷ 1.349 ÷ median) must be wide too."""
    robust_cv = iqr / 1.349 / med if iqr is not None and med else 0.0
    return cv is not None and cv > NOISY_CV and robust_cv > NOISY_CV / 2


def shared_noise(fig: JobFigures) -> bool:
    """Whether a noisy job's disturbance is one that lock-step rounds share between the two jobs of a round, so
    that the interval over rounds counts it and it need not void the verdict: the machine's alone (no scatter, enough
    steady steps) and moderate (its threads waited, others used its CPUs and the hypervisor stole at most
    ``SHARED_LIMIT`` each, and it kept the CPU ``NOISY_CPU_SHARE`` of its wall time). The two jobs take turns of a few
    steps on the same CPU, so a spell of other work lasting longer than a turn reaches both. On a 2-core VM a quiet
    machine flagged 19 of 20 lock-step A/A comparisons at 10-17 % (the runner's own work beside the jobs); judged
    with this rule, 1 of their 40 intervals, quiet and beside a bursty process, excluded 1
    (benchmarks/aa_coverage_lockstep.md)."""
    if not fig.noisy or fig.steady_steps < MIN_STEADY or _scatter(fig.step_cv, fig.step_iqr_s, fig.median_step_s):
        return False
    shares = (fig.wait_share, fig.others_share, fig.steal_share)
    return (all(x is None or x <= SHARED_LIMIT for x in shares)
            and (fig.cpu_share is None or fig.cpu_share >= NOISY_CPU_SHARE))


def voided(fig: JobFigures, pairing: str) -> bool:
    """Whether a job's disturbance voids what its round measured: a noisy job, unless its comparison ran lock-step
    rounds (``pairing``) and the disturbance is one both jobs of a round share (``shared_noise``). Its pair's verdict
    is then inconclusive whatever the interval (``Comparison.voids``), and its round is left out of the earlier
    comparisons a new one is tested against (``comparison.stored.earlier_spreads``)."""
    return bool(fig.noisy) and not (pairing == "lockstep" and shared_noise(fig))


def _noise(st: Sequence[StepRecord], med: float, threads: int | None, wait_share: float | None,
           steal_share: float | None, blocks: bool = False,
           others_share: float | None = None) -> tuple[float | None, float | None, float | None, list[str]]:
    """IQR, CV, CPU share of the steady steps and the reasons to distrust them. ``blocks``: the job blocks in its
    own collectives (a data-parallel rank waits for the others' gradients) or on its GPU (a CUDA job's host thread
    sleeps in each step's synchronisation: 6 % CPU on an H200), so a CPU share below 1 is no sign of another
    process; only its threads' wait for a CPU (the run queue) and others' use of its CPUs say so."""
    times = sorted(r.step_s for r in st)
    reasons: list[str] = []
    iqr = cv = share = None
    if len(times) >= 2:
        q = statistics.quantiles(times, n=4, method="inclusive")
        iqr = q[2] - q[0]
        cv = statistics.stdev(times) / statistics.fmean(times)
        # one slow outlier (a GC pause) moves the CV but not the median: judge scatter by the robust spread too
        if _scatter(cv, iqr, med):
            reasons.append(f"its steady steps scatter (CV {cv:.0%}, IQR {iqr * 1e3:.1f} ms on a "
                           f"{med * 1e3:.1f} ms median)")
    cpu = [r.cpu_s for r in st if r.cpu_s is not None]
    lost = []
    if threads and len(cpu) == len(st) and st:
        share = sum(cpu) / (sum(r.step_s for r in st) * threads)
        if share < NOISY_CPU_SHARE and not blocks:
            lost.append(f"the job had the CPU {share:.0%} of its wall time ({threads} thread(s))")
    if wait_share is not None and wait_share > NOISY_WAIT_SHARE:
        lost.append(f"its threads waited for a CPU {wait_share:.0%} of the time")
    others = others_share is not None and others_share > NOISY_WAIT_SHARE
    if others:
        lost.append(f"other processes used its CPUs {others_share:.0%} of the time")
    if lost:   # a wait alone may be the job's own threads outnumbering the cores (XLA's CPU runtime keeps its own)
        why = ("another process was running" if others or len(lost) > 1 or wait_share is None
               or wait_share <= NOISY_WAIT_SHARE
               else "another process was running, or the job's threads outnumbered the cores (a runtime's own "
                    "threads count: XLA's on CPU)")
        reasons.append(" and ".join(lost) + ": " + why)
    if steal_share is not None and steal_share > NOISY_STEAL:
        reasons.append(f"the hypervisor took {steal_share:.0%} of the machine's CPU time (steal): the host is busy")
    if len(st) < MIN_STEADY:
        reasons.append(f"only {len(st)} steady step(s): too few to know their spread")
    return iqr, cv, share, reasons


def job_figures(records: Sequence[StepRecord], batch_size: int, warmup_steps: int, threads: int | None = None,
                wait_share: float | None = None, probe: dict | None = None, steal_share: float | None = None,
                blocks: bool = False, others_share: float | None = None, **given: Any) -> JobFigures:
    """All of a job's figures from its step records (``blocks``: a data-parallel job, see ``_noise``).

    ``probe``: the matmul peak used for MFU (``{"flops": ..., "disturbed": reason or ""}``);
    ``given``: figures the job reported itself (n_params, flops_per_step, recompiles_after_warmup, graph_breaks).
    """
    st = steady(records)
    warm = [r for r in records if r.warmup]
    losses = [r.loss for r in records if r.loss is not None]
    fig: dict[str, Any] = dict(given, warmup_s=sum(r.step_s for r in warm) if warm else None,
                               peak_mem_bytes=max((r.mem_bytes for r in records), default=None),
                               final_loss=losses[-1] if losses else None, steady_steps=len(st))
    if not st:
        return JobFigures(**fig)
    med = statistics.median(r.step_s for r in st)
    tokens = statistics.median(batch_size * r.seq_len for r in st)
    iqr, cv, share, reasons = _noise(st, med, threads, wait_share, steal_share, blocks, others_share)
    fig.update(median_step_s=med, fast_step_s=fast_step([r.step_s for r in st]), samples_s=batch_size / med,
               tokens_s=tokens / med, step_iqr_s=iqr, step_cv=cv,
               cpu_share=share, wait_share=wait_share, steal_share=steal_share, others_share=others_share,
               noisy=bool(reasons), noise_reason="; ".join(reasons))
    if len(warm) == warmup_steps and warmup_steps > 0:
        fig["compile_latency_s"] = max(sum(r.step_s for r in warm) - warmup_steps * med, 0.0)
    fig["mfu"], fig["mfu_note"] = mfu(given.get("flops_per_step"), med, probe)
    if probe:
        fig["peak_flops"] = probe.get("flops")
    return JobFigures(**fig)


def mfu(flops_per_step: float | None, step_s: float, probe: dict | None) -> tuple[float | None, str]:
    """(MFU, note): None with the reason when the figure would not be honest (no probe, a disturbed
    probe, or a value above 1, which means the probe under-measured the machine's peak)."""
    if not flops_per_step:
        return None, "MFU unknown: no FLOP count for this model"
    if not probe or not probe.get("flops"):
        return None, "MFU unknown: " + ((probe or {}).get("error") or "no peak-FLOPs probe")
    if probe.get("disturbed"):
        return None, f"MFU not reported: the peak-FLOPs probe was disturbed ({probe['disturbed']})"
    value = flops_per_step / step_s / probe["flops"]
    if value > 1:
        return None, (f"MFU not reported: it would be {value:.2f} > 1, so the peak-FLOPs probe under-measured "
                      "this machine (run it again on a quiet machine)")
    return value, ""


# -- pairs: verdict, break-even, warnings (the interval: tcbench.measure.interval) ---------------------------
STOP_KINDS = ("rounds", "resolved", "budget", "max_rounds", "broken", "stopped")   # why rounds ended


def advice(threads: int | None, rounds: int, resolve: float | None, budget_s: float | None, stop_kind: str = "",
           noisy: bool = False, max_rounds: int | None = None, gpu: bool = False, round_s: float | None = None,
           pilot: int | None = None) -> str:
    """What would make the next measurement decisive, matched to why this one was not: disturbed jobs (``noisy``)
    need a quieter machine, not more rounds; otherwise what ended the rounds (``stop_kind``, one of ``STOP_KINDS``:
    a fixed count, the budget, the maximum, a resolution too coarse for the difference). Names only settings the
    job did not already use; ``gpu``: the jobs computed on a GPU, whose steps OpenMP threads do not scatter. When
    the budget ended the rounds, ``round_s`` (what a round took, as the budget counts it) turns "more time" into a
    figure: the budget that the rule's ``pilot`` rounds need, where fewer ran (on an H200, gpt2 base's rounds took
    27 s and the default 60 s bought 2, which no spread can decide)."""
    spinning = threads != 1 and not gpu
    out = ["run with threads=1 (spinning OpenMP threads of 2+ per job make steps scatter)"] if spinning else []
    if noisy:
        return "; ".join([*out, "stop other work on this machine (or run on cores no other process uses)"])
    if resolve is None or stop_kind == "rounds":
        out.append(f"let the rounds adapt: resolve=0.05, budget_s=120 (this comparison ran a fixed {rounds})")
    elif stop_kind == "resolved":
        out.append(f"ask for a finer resolution than ±{resolve:.0%} (resolve={resolve / 2:g}): the difference, if "
                   "any, is smaller than this comparison was asked to resolve")
    elif stop_kind == "max_rounds":
        out.append(f"allow more rounds than max_rounds={max_rounds or rounds}")
    elif stop_kind == "stopped":
        out.append("let the rounds run until the rule stops them")
    elif budget_s is not None:
        more = f"give the rounds more time than budget_s={budget_s:g}"
        if round_s and pilot and rounds < pilot:
            need = math.ceil(pilot * round_s / 10) * 10
            more += (f": a round took about {round_s:.0f} s here, and the rule's first {pilot} rounds (its pilot) "
                     f"need about budget_s={need:g}")
        elif round_s:
            more += f" (a round took about {round_s:.0f} s here)"
        out.append(more)
    out.append("stop other work on this machine")
    return "; ".join(out)


def verdict(speedup: float | None, low: float | None, high: float | None, noisy: Sequence[str],
            problems: Sequence[str], rounds: int, what_to_do: str, margin: float = EQUIVALENCE,
            equivalence: tuple[float | None, float | None] | None = None) -> tuple[str, str]:
    """(kind, sentence). ``faster``/``slower`` only when the 95 % interval excludes 1 and no job was noisy; "no
    measurable difference" only when the ``equivalence`` interval (the 90 % one: two one-sided tests at 5 % each,
    Schuirmann 1987; None: the 95 % one) lies within the equivalence ``margin`` (the asked resolution: 0.05 is
    [1/1.05, 1.05]); an interval that contains 1 and reaches past it is "inconclusive", with its bounds.
    ``what_to_do``: the advice when it cannot decide (``advice``)."""
    single = " (single round: no run-to-run spread)" if rounds == 1 else ""
    if problems:
        return "inconclusive", "inconclusive: " + "; ".join(problems)
    if speedup is None or low is None or high is None:
        return "inconclusive", "inconclusive: no steady steps to compare"
    ci = f"{fmt_ratio(speedup)} (95 % interval {fmt_ratio(low)}–{fmt_ratio(high)}){single}"
    if noisy:
        which = noisy[0] if len(noisy) == 1 else f"{len(noisy)} jobs were disturbed, e.g. {noisy[0]}"
        return "inconclusive", f"inconclusive: {which} — {what_to_do}. Measured {ci}"
    if low > 1:
        return "faster", f"faster: {ci}"
    if high < 1:
        return "slower", f"slower: {ci}"
    tost = equivalence is not None and None not in equivalence
    eq_low, eq_high = equivalence if tost else (low, high)
    if eq_high <= 1 + margin and eq_low >= 1 / (1 + margin):
        if not tost:
            return "no measurable difference", (f"no measurable difference: {ci} lies within ±{margin:.0%} of 1, "
                                                "the resolution asked for")
        return "no measurable difference", (
            f"no measurable difference: {ci}; its 90 % interval {fmt_ratio(eq_low)}–{fmt_ratio(eq_high)} lies within "
            f"±{margin:.0%} of 1, the resolution asked for (two one-sided tests at 5 %)")
    return "inconclusive", (f"inconclusive: {fmt_between(speedup, low, high)}{single}: it contains 1 and reaches "
                            f"past ±{margin:.0%} — {what_to_do}")


def drift(label: str, medians_s: Sequence[float]) -> str:
    """A warning when one job's median step moved more than DRIFT between its rounds ("" when it did not): the
    machine's speed changed during the comparison, or rounds landed in different layout modes (every round forks
    from a launcher of its own). The interval already counts the spread; this says why it is wide."""
    if len(medians_s) < 2 or min(medians_s) <= 0:
        return ""
    lo, hi = min(medians_s), max(medians_s)
    if hi / lo - 1 <= DRIFT:
        return ""
    return (f"drift: the {label} job's median step moved {hi / lo - 1:.0%} between rounds ({lo * 1e3:.1f}–"
            f"{hi * 1e3:.1f} ms): the machine's speed, or the luck of each round's process (where its memory "
            "landed), moved it; the interval counts this spread")


def break_even_range(compile_latency_s: float | None, native_step_s: float | None,
                     low: float | None, high: float | None) -> tuple[float | None, float | None]:
    """(fewest, most) steps after which compiling has paid for itself, from the speedup interval.

    Only meaningful when the compiled job is measurably faster (``low > 1``); else (None, None)."""
    if None in (compile_latency_s, native_step_s, low, high) or low <= 1:
        return None, None
    return (break_even_steps(compile_latency_s, native_step_s, native_step_s / high),
            break_even_steps(compile_latency_s, native_step_s, native_step_s / low))


def break_even_steps(compile_latency_s: float | None, native_step_s: float | None,
                     compiled_step_s: float | None) -> float | None:
    """Steps after which compiling has paid for itself; inf when the compiled step is not faster."""
    if compile_latency_s is None or native_step_s is None or compiled_step_s is None:
        return None
    gain = native_step_s - compiled_step_s
    if gain <= 0:
        return float("inf")
    return compile_latency_s / gain


def warnings_for(kind: str, speedup: float | None, compile_latency_s: float | None, memory_ratio: float | None,
                 memory_high: float | None, recompiles: int | None) -> list[str]:
    """The protocol's warnings, in words a student understands; only what the measurement supports."""
    out = []
    if kind == "slower" and speedup is not None and round(speedup, 2) < WARN_SPEEDUP:
        out.append(f"slower: the compiled step takes {1 / speedup:.2f}× the native step")
    if compile_latency_s is not None and compile_latency_s > WARN_COMPILE_S:
        out.append(f"long compile: {compile_latency_s:.0f} s of compile latency (> {WARN_COMPILE_S:.0f} s)")
    sure = memory_high if memory_high is not None else memory_ratio
    if memory_ratio is not None and sure is not None and round(sure, 2) < WARN_MEMORY_RATIO:
        out.append(f"memory regression: compiled peak is {1 / memory_ratio:.2f}× the native peak")
    if recompiles:
        out.append(f"recompilations after warmup: {recompiles} (new input shapes? pad to max_length)")
    return out


# -- loss parity -------------------------------------------------------------------------------------------
def _finite_losses(records: Sequence[StepRecord]) -> list[tuple[int, float]]:
    return [(r.step, r.loss) for r in records if r.loss is not None and math.isfinite(r.loss)]


def _window(vals: Sequence[float]) -> tuple[float, float]:
    """(mean, variance) of a window of losses."""
    return statistics.fmean(vals), statistics.variance(vals) if len(vals) > 1 else 0.0


def learned(records: Sequence[StepRecord]) -> tuple[bool, float, float, int]:
    """(learned, drop, noise, window): did the loss fall by more than the noise of its first and last windows?"""
    vals = [v for _, v in _finite_losses(records)]
    w = max(3, min(10, len(vals) // 4))
    if len(vals) < 2 * w:
        return False, 0.0, 0.0, w
    (m0, v0), (m1, v1) = _window(vals[:w]), _window(vals[-w:])
    drop, noise = m0 - m1, math.sqrt(v0 / w + v1 / w)
    return drop > max(3 * noise, LEARN_MIN_DROP * abs(m0)), drop, noise, w


def loss_parity(native: Sequence[StepRecord], compiled: Sequence[StepRecord], precision: str = "fp32",
                dropout_off: bool = False, early_rtol: float | None = None) -> tuple[bool | None, float | None, str]:
    """(parity, |difference of the last windows|, note). None ("not judged") when the native loss did not fall and
    the first losses agree (or dropout is on).

    Same seed and data order: a compiled job must learn as the native one does (its last window within
    max(3 noise units, 20 % of the native drop)); with dropout off its first losses must also agree
    within a per-precision relative tolerance (no random masks, so only kernel rounding differs), or
    ``early_rtol`` when given.
    """
    nat, com = _finite_losses(native), _finite_losses(compiled)
    if not nat or not com:
        return None, None, "not judged: no logged losses"
    early = _early_mismatch(nat, com, precision, early_rtol) if dropout_off else ""
    ok, drop, noise, w = learned(native)
    if not ok:
        if early:
            return False, None, early
        return None, None, (f"not judged: the native loss did not fall in {len(native)} steps "
                            f"(raise steps or lr)" + ("; its first losses agree (dropout off)" if dropout_off else ""))
    n_last = statistics.fmean(v for _, v in nat[-w:])
    c_vals = [v for _, v in com[-w:]]
    diff = abs(statistics.fmean(c_vals) - n_last)
    tol = max(3 * noise, PARITY_DROP_SHARE * drop)
    if diff > tol:
        return False, diff, (f"the compiled loss ends {diff:.3f} away from native's (tolerance {tol:.3f}: "
                             f"native fell {drop:.3f})")
    if early:
        return False, diff, early
    return True, diff, f"within tolerance ({diff:.3f} ≤ {tol:.3f}; native fell {drop:.3f})"


def _early_mismatch(nat: Sequence[tuple[int, float]], com: Sequence[tuple[int, float]], precision: str,
                    early_rtol: float | None) -> str:
    """With dropout off: the first logged losses must agree within a relative tolerance per precision (or
    ``early_rtol``); why they do not ("" when they do)."""
    rtol = early_rtol if early_rtol is not None else EARLY_RTOL.get(precision, EARLY_RTOL["fp32"])
    early_c = dict(com)
    for step, v in nat[:EARLY_STEPS]:
        if step in early_c and abs(early_c[step] - v) > rtol * max(abs(v), 1e-8):
            return (f"with dropout off the losses at step {step} differ: {v:.5f} vs {early_c[step]:.5f} "
                    f"(relative tolerance {rtol:g} for {precision})")
    return ""
