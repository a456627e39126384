"""How a job ended: its status and error from its ``End`` message (if it sent one), the exit code of its process,
the runner's own reason to end it (a stop, a stall, a timeout) and, for a data-parallel job, its ranks' ends."""

from __future__ import annotations

import signal

from tcbench.core.results import JobResult
from tcbench.job.protocol import End
from tcbench.measure.job import job_noise_scale


def conclude(result: JobResult, end: End | None, returncode: int, ending: str) -> None:
    """Set ``result``'s status and error, and keep what its ``End`` carried (counters, diagnostics, the gradient
    noise scale, the traceback). ``ending``: why the runner ended the job ("" when it ended by itself)."""
    spec = result.spec
    if end is not None:
        result.status, result.error = end.status, end.error
        result.extra.counters = end.counters or {}
        # graph breaks, recompiles, fallbacks, host transfers: where and why
        result.extra.diagnostics = end.diagnostics or {}
        if end.noise:   # the gradient noise scale from the steady steps' micro-batch gradient norms
            result.extra.noise_samples = end.noise
            result.extra.noise_scale, result.extra.noise_scale_error = job_noise_scale(end.noise, spec, result.run_id)
        result.extra.traceback = end.traceback or ""
        if spec.script is not None and returncode > 0 and result.ok:
            result.status, result.error = script_ending(result, returncode)
    elif ending:
        result.status, result.error = "interrupted", ending
    elif returncode < 0:
        sig = signal.Signals(-returncode).name
        hint = " (possibly the kernel's out-of-memory killer)" if sig == "SIGKILL" else ""
        result.status, result.error = "interrupted", f"the job process was killed by {sig}{hint}"
    elif spec.script is not None:
        result.status, result.error = script_ending(result, returncode)
    else:
        result.status = "failed"
        result.error = (f"the job process exited with code {returncode} before reporting; log tail:\n"
                        + result.log_tail[-1500:])
    rank_failure(result, ending)


def rank_failure(result: JobResult, ending: str) -> None:
    """A data-parallel job ends as its first failing rank says (torchrun then stops the others, rank 0 too)."""
    failed = {r: e for r, e in result.extra.rank_ends.items() if e.status != "ok"}
    if not failed or ending:   # a stop, a stall or a timeout says why itself
        return
    rank, first = next(iter(failed.items()))
    if result.status in ("ok", "failed", "interrupted"):
        result.status = first.status or "failed"
        result.error = f"rank {rank}: {first.error or 'failed'}"[:2000]


def script_ending(result: JobResult, returncode: int) -> tuple[str, str]:
    """(status, error) of a script that ended on its own without an ``end`` message, or with an error after it."""
    n = len(result.records)
    if returncode == 0 and n:
        return "ok", ""
    if returncode == 0:
        return "failed", ("the script exited (code 0) without reporting a step, so nothing was measured: wrap its "
                          "loop in `with tcbench.track() as t:` and call `t.step(loss)` per step, or add "
                          "`tcbench.hf.TcbenchCallback()` to its Trainer's callbacks (see examples/)")
    done = f"after {n} measured step(s), which are kept" if n else "before reporting a step"
    return "failed", f"the script exited with code {returncode} {done}; log tail:\n" + result.log_tail[-1500:]
