"""Entry points with many settings take one options dataclass; a keyword named like a field overrides it."""

from __future__ import annotations

import pytest

import tcbench as tc
from tcbench.core.options import merged

SPEC = tc.JobSpec(model="gpt2", size="tiny")


def test_options_are_merged_with_the_keywords_that_override_them():
    base = tc.RetuneOptions(n_trials=3, seeds=2)
    got = merged(tc.RetuneOptions, base, {"seeds": 3}, "retune_lr")
    assert (got.n_trials, got.seeds) == (3, 3) and base.seeds == 2   # the given options are left as they were
    assert merged(tc.RetuneOptions, None, {}, "retune_lr") == tc.RetuneOptions()


@pytest.mark.parametrize("call", [
    lambda: tc.retune_lr(SPEC, 16, n_trail=3),
    lambda: tc.tune_compile(SPEC, budget=60),
])
def test_an_unknown_keyword_names_the_fields_allowed_before_anything_runs(call, no_process):
    with pytest.raises(TypeError, match=r"unexpected keyword argument '(n_trail|budget)'; it takes the fields of "
                                        r"(RetuneOptions|CompileSearchOptions): "):
        call()


def test_options_of_another_kind_and_positional_settings_are_refused(no_process):
    with pytest.raises(TypeError, match=r"tune_compile\(options=.*pass a CompileSearchOptions or None"):
        tc.tune_compile(SPEC, options=tc.RetuneOptions())
    with pytest.raises(TypeError):
        tc.retune_lr(SPEC, 16, 12)   # n_trials is no longer the third positional argument
