"""A compiled job's cache state: cold when it compiled a graph its caches did not hold, warm when every graph came
from them, whatever files the load added (``tcbench.runner.process.cache_state_of``)."""

from __future__ import annotations

import pytest

from tcbench.core.extras import CompilePhases
from tcbench.runner.process import cache_state_of


def phases(aot: tuple[int, int] | None, fx: tuple[int, int] | None) -> CompilePhases:
    return CompilePhases(aot_cache_hits=aot and aot[0], aot_cache_misses=aot and aot[1],
                         fx_cache_hits=fx and fx[0], fx_cache_misses=fx and fx[1])


def test_a_job_whose_graphs_all_came_from_the_caches_is_warm_though_it_added_files():
    # the first warm job on CUDA: every graph a hit, one Triton kernel binary compiled anew into the cache
    assert cache_state_of("shared", True, True, phases((2, 0), (3, 0))) == "warm"


@pytest.mark.parametrize("aot, fx", [((0, 2), (0, 3)), ((2, 0), (2, 1)), ((1, 1), (3, 0)), (None, (0, 3))])
def test_a_job_that_compiled_a_graph_its_caches_lacked_is_cold_though_no_file_was_added(aot, fx):
    assert cache_state_of("shared", True, False, phases(aot, fx)) == "cold"


def test_without_the_compilers_counts_the_caches_files_decide():
    for p in (None, CompilePhases(compile_dynamo_s=1.0)):
        assert cache_state_of("shared", True, True, p) == "cold"
        assert cache_state_of("shared", True, False, p) == "warm"


def test_the_specs_cold_or_artifacts_cache_and_a_backend_that_keeps_none_say_so_whatever_the_counts():
    warm = phases((2, 0), (3, 0))
    assert cache_state_of("cold", True, False, warm) == "cold"
    assert cache_state_of("artifacts", True, False, warm) == "artifacts"
    assert cache_state_of("shared", False, False, warm) == "cold"   # xla on the CPU device: nothing kept
