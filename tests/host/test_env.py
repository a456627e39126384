"""The run environment: torch's version as ``torch.__version__`` (and ``torch.utils.collect_env``) give it, its local
label (``+cu128``, ``+cpu``: which build) kept, read without importing torch (issue 25, part 4)."""

import sys

import pytest

from tcbench.host import env as _env
from tcbench.host.requirements import in_range, release, xla_mismatch


@pytest.fixture
def fresh_env():
    _env.static_env.cache_clear()
    yield _env.static_env
    _env.static_env.cache_clear()


def test_the_local_label_is_kept_and_torch_is_not_imported(tmp_path, monkeypatch, fresh_env):
    pkg = tmp_path / "torch"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise ImportError('importing torch to read its version')\n")
    (pkg / "version.py").write_text("from typing import Optional\n\n__all__ = ['__version__']\n"
                                    "__version__ = '2.9.0+cu128'\ncuda: Optional[str] = '12.8'\n")
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _env.torch_version() == "2.9.0+cu128" and fresh_env()["torch"] == "2.9.0+cu128"
    assert "torch" not in sys.modules
    # major.minor comparisons read through the label
    assert release("2.9.0+cu128")[:2] == (2, 9) and in_range("2.9.0+cu128", ">=2.4,<3")
    assert xla_mismatch("2.9.0+cu128", "2.9.0") is None


def test_a_stored_environment_has_torch_dunder_version(monkeypatch, fresh_env):
    torch = pytest.importorskip("torch")
    full = str(torch.__version__)
    monkeypatch.delitem(sys.modules, "torch")   # as in tcbench's parent process, which never imports torch
    assert _env.job_env(1)["torch"] == full
