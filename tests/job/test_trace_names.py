"""Dynamo names the function of each traced line for its trace logs only: tcbench's compiled jobs ask for the names
while such a log is on, and tokenize no source file otherwise (``trace_log_names_on_demand``)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def _double_then_add(x):
    return x * 2 + 1


@pytest.fixture()
def dynamo(monkeypatch):
    """Dynamo with its own names, restored after the test (the patch replaces a module global)."""
    from torch._dynamo import funcname_cache
    from torch._dynamo import symbolic_convert as sc

    monkeypatch.setattr(sc, "get_funcname", funcname_cache.get_funcname)
    monkeypatch.setattr(funcname_cache, "cache", {})
    torch._dynamo.reset()
    yield sc, funcname_cache
    torch._logging.set_logs()
    torch._dynamo.reset()


def test_a_compile_tokenizes_no_source_file_while_the_trace_logs_are_off(dynamo):
    from tcbench.job.backends.inductor import trace_log_names_on_demand

    sc, funcname_cache = dynamo
    assert trace_log_names_on_demand() == "on demand"
    assert trace_log_names_on_demand() == "on demand"   # twice: the same wrapper, not one around another
    out = torch.compile(_double_then_add, backend="eager")(torch.ones(3))
    assert torch.equal(out, torch.full((3,), 3.0))
    assert __file__ not in funcname_cache.cache   # Dynamo as it is names every traced line's file: this one
    assert sc.get_funcname(__file__, 12) is None


def test_the_names_are_torchs_own_while_a_trace_log_is_on(dynamo):
    from tcbench.job.backends.inductor import trace_log_names_on_demand

    sc, funcname_cache = dynamo
    trace_log_names_on_demand()
    torch._logging.set_logs(trace_call=True)
    assert sc.get_funcname(__file__, 12) == "_double_then_add"
    assert __file__ in funcname_cache.cache


def test_dynamo_as_it_is_tokenizes_the_traced_file(dynamo):
    """The saving the other tests keep: without the patch, a compile tokenizes the file of each traced line."""
    _, funcname_cache = dynamo
    torch.compile(_double_then_add, backend="eager")(torch.ones(3))
    assert __file__ in funcname_cache.cache
