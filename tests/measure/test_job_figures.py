"""A job's figures from what it reported (tcbench.measure.job): small hand-made inputs, exact expected values."""

from __future__ import annotations

import dataclasses
import math

from tcbench.core.results import StepRecord
from tcbench.core.spec import JobSpec
from tcbench.core.extras import AllReduceSummary, SchedTimes
from tcbench.measure.job import (allreduce_summary, compile_counts, counted_batch_size, datasheet_peak, figures,
                                 job_noise_scale, mfu_reference, noise_steps, standard_error, wait_share)
from tcbench.measure.metrics import job_figures


def _rec(step: int, step_s: float, samples_s: float = 80.0, warmup: bool = False, **kw) -> StepRecord:
    return StepRecord(step=step, step_s=step_s, samples_s=samples_s, tokens_s=samples_s * 32, mem_bytes=100 * step,
                      warmup=warmup, seq_len=32, **kw)


def test_the_batch_samples_are_counted_with_is_a_scripts_own_else_the_specs():
    recs = [_rec(0, 1.0, 99.0, warmup=True), _rec(1, 0.5, 8.0), _rec(2, 0.25, 16.0), _rec(3, 0.5, 12.0)]
    assert counted_batch_size(JobSpec(batch_size=7), recs) == 7                 # tcbench's worker: the spec's
    assert counted_batch_size(JobSpec(script="train.py", batch_size=7), recs) == 4   # median of 4, 4, 6
    assert counted_batch_size(JobSpec(script="train.py", batch_size=7), recs[:1]) == 7   # no steady step


def test_the_wait_share_is_over_every_thread_or_a_ranks_main_thread():
    def sched(wall_s: float, wait_s: float | None, main_only: bool = False) -> SchedTimes:
        return SchedTimes(wall_s=wall_s, cpu_s=wall_s, wait_s=wait_s, steal_share=None, wait_main_only=main_only)

    assert wait_share(sched(2.0, 0.4), 4) == 0.05
    assert wait_share(sched(2.0, 0.4, main_only=True), 4) == 0.2
    assert wait_share(sched(2.0, None), 4) is None
    assert wait_share(sched(0.0, 0.4), 4) is None
    assert wait_share(None, 4) is None


def test_the_datasheet_peak_is_the_profiles_figure_for_the_precision():
    assert datasheet_peak("ml.g4dn.xlarge", "fp16") == {"flops": 65e12, "disturbed": "",
                                                         "source": "ml.g4dn.xlarge datasheet"}
    assert datasheet_peak("ml.g4dn.xlarge", "bf16") == {
        "error": "the profile 'ml.g4dn.xlarge' has no bf16 datasheet peak"}
    assert datasheet_peak("no-such-profile", "fp32") == {
        "error": "the profile 'no-such-profile' has no fp32 datasheet peak"}


def test_a_gpu_job_is_measured_against_the_datasheet_a_cpu_job_against_the_probe():
    spec, probe = JobSpec(profile="ml.g4dn.xlarge", precision="fp32"), {"flops": 1e9, "disturbed": ""}
    assert mfu_reference("cpu", spec, probe) is probe
    assert mfu_reference("cuda:0", spec, probe) == {"flops": 8.1e12, "disturbed": "",
                                                    "source": "ml.g4dn.xlarge datasheet"}


def test_recompiles_after_warmup_and_graph_breaks_come_from_the_counters():
    assert compile_counts({"compiles": 5, "graph_breaks": 2}, {"compiles": 3}) == {"recompiles_after_warmup": 2,
                                                                                  "graph_breaks": 2}
    assert compile_counts({"compiles": 5}, {}) == {"recompiles_after_warmup": None, "graph_breaks": None}
    assert compile_counts(None, None) == {"recompiles_after_warmup": None, "graph_breaks": None}


def test_a_jobs_figures_are_job_figures_with_its_reported_inputs():
    spec = JobSpec(batch_size=8, warmup_steps=2, steps=6, nproc=2, threads=1)
    recs = [_rec(0, 2.0, warmup=True), _rec(1, 1.0, warmup=True)] + [_rec(i, 0.5, cpu_s=0.5) for i in range(2, 6)]
    probe = {"flops": 1e3, "disturbed": ""}
    sched = SchedTimes(wall_s=2.0, cpu_s=2.0, wait_s=0.5, steal_share=0.125, wait_main_only=True, others_share=0.02)
    got = figures(recs, spec, probe, 2, sched, n_params=10, flops_per_step=100.0, recompiles_after_warmup=1)
    assert got == job_figures(recs, 8, 2, threads=2, wait_share=0.25, steal_share=0.125, probe=probe, blocks=True,
                              others_share=0.02, n_params=10, flops_per_step=100.0, recompiles_after_warmup=1)
    assert (got.median_step_s, got.samples_s, got.tokens_s, got.wait_share, got.steal_share) == (0.5, 16.0, 512.0, 0.25,
                                                                                                  0.125)
    assert (got.compile_latency_s, got.mfu, got.peak_mem_bytes, got.recompiles_after_warmup) == (2.0, 0.2, 500, 1)
    assert got.noisy and "waited for a CPU 25%" in got.noise_reason


def test_the_allreduce_summary_is_over_the_steady_steps():
    recs = [_rec(1, 1.0), _rec(2, 0.25)]   # step 3's record is missing: no share for it
    rows = [[0, 999, 9.0, 1], [1, 100, 0.25, 2], [2, 300, 0.125, 2], [3, 200, 0.5, 3]]
    assert allreduce_summary(rows, recs, warmup_steps=1) == AllReduceSummary(
        bytes_per_step=200, ms_median=250.0, ms_q1=125.0, ms_q3=500.0, buckets=3, steps=3, share_of_step=0.375)
    assert allreduce_summary(rows[:2], [], warmup_steps=1) == AllReduceSummary(
        bytes_per_step=100, ms_median=250.0, ms_q1=250.0, ms_q3=250.0, buckets=2, steps=1, share_of_step=None)
    assert allreduce_summary(rows[:1], recs, warmup_steps=1) is None
    assert allreduce_summary([], recs, warmup_steps=0) is None


def test_the_eval_losss_standard_error_needs_two_batches():
    assert standard_error([1.0, 2.0, 3.0]) == 1 / math.sqrt(3)
    assert standard_error([1.0, 2.0]) == 0.5
    assert standard_error([2.0]) is None and standard_error([]) is None


def test_the_noise_scale_uses_the_later_half_of_the_steady_steps():
    samples = [{"small_sq": float(i), "big_sq": 0.0} for i in range(10)]
    assert noise_steps(samples, 2) == samples[6:]     # 8 steady steps: the last 4
    assert noise_steps(samples, 7) == samples[7:]     # 3 steady steps: all of them
    assert noise_steps(samples, 10) == []


def test_the_noise_scale_or_why_there_is_none():
    spec = JobSpec(batch_size=8, noise_micro_batches=4, warmup_steps=2, seed=0)
    # b = 2, B = 8: tr(Σ) = (2.5 - 1) / (1/2 - 1/8) = 4 and |G|² = (8 x 1 - 2 x 2.5) / 6 = 0.5, so B_simple = 8
    samples = [{"small_sq": 2.5, "big_sq": 1.0}] * 10
    got, why = job_noise_scale(samples, spec, run_id=7)
    assert why == "" and (got.b_simple, got.low, got.high, got.tr_sigma, got.g2) == (8.0, 8.0, 8.0, 4.0, 0.5)
    assert (got.batch_size, got.micro_batch, got.steps, got.run_id) == (8, 2, 4, 7)
    assert job_noise_scale(samples[:3], spec) == (
        None, "the gradient noise scale needs at least 2 measured steps; got 1")


def test_a_cuda_jobs_host_thread_sleeping_in_its_synchronisation_is_not_noise():
    """Seen on an H200 (benchmarks/gpu.md): every job had the CPU 6 % of its wall time, each flagged "another process
    was running", every verdict inconclusive. A CUDA job waits on its device; only the run queue and others' use of
    its CPUs say another process ran."""
    spec = JobSpec(batch_size=8, warmup_steps=2, steps=8, threads=16)
    recs = [_rec(0, 2.0, warmup=True), _rec(1, 1.0, warmup=True)] + [_rec(i, 0.5, cpu_s=0.48) for i in range(2, 8)]
    quiet = SchedTimes(wall_s=3.0, cpu_s=0.5, wait_s=0.0, steal_share=0.0, wait_main_only=False, others_share=0.01)
    assert not figures(recs, spec, {}, 16, quiet, "cuda:0").noisy
    assert figures(recs, spec, {}, 16, quiet, "cpu").noisy            # on the CPU the same share is another process
    busy = dataclasses.replace(quiet, others_share=0.3)
    assert "other processes used its CPUs 30%" in figures(recs, spec, {}, 16, busy, "cuda:0").noise_reason
