"""Measuring a job's gradient noise scale (``noise_scale``: one eager job with micro-batched gradients; the
estimator is ``tcbench.measure.noise_scale``) and finding a stored one (``stored_noise_scale``).

**The prediction** (``prediction.predict``), from lr0 at B0 to B1, with B_noise = B_simple:

- SGD-like optimisers (McCandlish eq. 2.6): ε(B) = ε_max / (1 + B_noise/B), so lr1 = lr0 · (1 + B_noise/B0) /
  (1 + B_noise/B1) — linear in B far below B_noise, flat far above it.
- Adam(W) (Li et al. 2024, "Surge Phenomenon in Optimal Learning Rate and Batch Size Scaling", arXiv
  2405.14578): ε(B) = ε_max / (½ (√(B_noise/B) + √(B/B_noise))), so lr1 = lr0 · g(B0) / g(B1) with
  g(B) = √(B_noise/B) + √(B/B_noise) — the square-root rule far below B_noise, the optimum at B = B_noise, and a
  falling rate beyond it.

Both assume lr0 is (near) optimal at B0, the same number of samples seen at both batch sizes, and a noise scale
that does not change much over training; each rule's interval comes from the noise scale's.
"""

from __future__ import annotations

from typing import Any

from tcbench.core.spec import NATIVE
from tcbench.measure.noise_scale import NoiseScale
from tcbench.store.api import Store

__all__ = ["NoiseScale", "noise_scale", "one_process", "stored_noise_scale"]


def one_process(spec: Any) -> Any:
    """The single-process job that makes ``spec``'s updates: its global batch in one process. DDP averages the
    ranks' gradients, so N processes × b samples and one process × N·b samples step alike (tc.scaling's parity
    check measures it); the noise scale and the learning rate depend on the global batch only."""
    return spec if spec.world_size == 1 else spec.replace(nproc=1, nnodes=1, node_rank=0, rdzv_endpoint=None,
                                                          batch_size=spec.global_batch)


def noise_scale(spec: Any, micro_batches: int = 2, observer: Any = None, stop: Any = None,
                store: Any = None) -> NoiseScale:
    """Measure the gradient noise scale of ``spec``'s native job (eager, fp32): one job whose steps take their
    gradient over ``micro_batches`` micro-batches (the same updates; the run is stored with the estimate in
    ``extra.noise_scale``). A job that fails or ends before 2 steady steps raises ``RuntimeError`` with why.
    A data-parallel ``spec`` (nproc > 1) is measured as one process at its global batch (``one_process``)."""
    from tcbench.runner.process import run

    job = one_process(spec).replace(backend=NATIVE, noise_micro_batches=micro_batches)
    res = run(job, observer, stop, store, label="noise-scale")
    if res.extra.noise_scale is None:
        why = res.extra.noise_scale_error or res.error or "no steady step was measured"
        raise RuntimeError(f"the noise-scale job (run {res.run_id}) ended {res.status}: {why}")
    return res.extra.noise_scale


def stored_noise_scale(spec: Any, store: Any = None) -> NoiseScale | None:
    """The latest stored noise scale measured on ``spec``'s job (same fields except the micro-batch count). The
    runs are narrowed by their columns (the model, size, batch and precision of the job), then compared whole."""

    store = store or Store()
    job = one_process(spec).replace(backend=NATIVE, noise_micro_batches=0)
    want = job.to_dict()
    for run in store.ok_runs(NATIVE, job.model, job.size, job.batch_size, job.precision):
        stored = run.spec.to_dict()
        if stored.get("noise_micro_batches") and {**stored, "noise_micro_batches": 0} == want:
            if run.extra.noise_scale is not None:
                return run.extra.noise_scale
    return None
