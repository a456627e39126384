"""tune_compile with real jobs on tiny GPT-2 (1 thread, dropout off, the shared compile cache): it returns a
configuration that kept loss parity, rejects one made to break it, stores every trial as a labelled run, and its
confirmation reloads with each configuration's own spec. Behaviour, not timings."""

from __future__ import annotations

import pytest

import tcbench as tc

pytestmark = pytest.mark.integration

# seq 32, as tests/comparison/test_comparison.py's TINY: its fp32 and bf16 Inductor graphs are compiled there too
SPEC = tc.JobSpec(dropout=0.0, seq_len=32, steps=20, warmup_steps=3, threads=1)


def test_a_real_search_keeps_parity_and_rejects_bf16_under_a_tolerance_it_cannot_meet(store, monkeypatch, capsys):
    """bf16 autocast moves the first losses by ~3e-5 relative here, fp32 Inductor by ~1e-7: a tolerance of 5e-6
    keeps the fp32 configuration and rejects the bf16 one (the kernels are the same on every run)."""
    res = tc.tune_compile(SPEC, budget_s=900, sampler="grid", pruner="none", parity_rtol=5e-6, confirm_budget_s=30,
                          space={"compile_mode": ["default"], "compile_scope": ["model"], "compile_optimizer": [False],
                                 "precision": ["fp32", "bf16"], "cpp_wrapper": [False]}, store=store)
    t = res.trials.set_index("label")
    assert list(res.trials["state"]) == ["COMPLETE", "COMPLETE"], res.trials[["label", "state", "reason"]]
    assert t.loc["inductor · default", "parity"] == True  # noqa: E712
    assert t.loc["inductor · bf16", "parity"] == False and "loss parity failed" in t.loc["inductor · bf16", "reason"]  # noqa: E712
    assert res.best == tc.CompileConfig() and res.stop_reason.startswith("every configuration")
    runs = store.comparison_runs(res.comparison_id)
    assert sorted(runs["label"].fillna("")) == ["", "inductor · bf16", "inductor · default"]   # native + 2 trials
    assert set(runs["status"]) == {"ok"}
    cmp = res.confirmation
    assert cmp is not None and cmp.backends == ["eager", "inductor · default"] and cmp.rounds >= 2
    assert "against native:" in res.answer() and res.vs_native[0] is not None
    again = tc.load_comparison(cmp.comparison_id, store)
    assert again.variants["inductor · default"] == cmp.spec_for("inductor · default")
    assert again.row("inductor · default").speedup == pytest.approx(cmp.row("inductor · default").speedup)
    monkeypatch.setenv("TCBENCH_DB", str(store.path))   # `tcbench show` prints the confirmation like a comparison
    from tcbench.cli.app import main

    capsys.readouterr()
    assert main(["show", str(cmp.comparison_id)]) == 0
    assert "inductor · default" in capsys.readouterr().out
