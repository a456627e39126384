"""The Batch & LR tab's optuna-dashboard link, without a browser: offered only for a study kept in a database, a
button that serves it from the kernel when optuna-dashboard is installed, how to install it when not, and the
terminal command (password masked) either way. ``tc.retune_lr`` is replaced by a scripted one (no job runs)."""

from __future__ import annotations

import json
import sys
import types
import urllib.error
import urllib.request

import pandas as pd
import pytest

import tcbench as tc
from tcbench.widgets import Workbench


@pytest.fixture
def tab(tmp_path, monkeypatch):
    monkeypatch.setenv("TCBENCH_DB", str(tmp_path / "panel.db"))
    tab = Workbench(model="bert-base-cased", size="tiny", batch_size=4).tuning
    yield tab
    tab.close_dashboard()


@pytest.fixture
def study_url(tmp_path) -> str:
    """An SQLite study 'shared' holding two finished trials."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(storage=url, study_name="shared")
    study.optimize(lambda t: t.suggest_float("lr", 1e-4, 1e-1, log=True), n_trials=2)
    return url


def _shown(tab) -> bool:
    return tab.dashboard_button.layout.display != "none"


def test_nothing_is_offered_for_a_study_kept_in_memory(tab):
    tab.show_study(None, None, "")
    assert tab.dashboard_note.value == "" and not _shown(tab)
    assert tab.open_dashboard() is None


def test_the_button_serves_the_study_from_the_kernel_and_links_to_it(tab, study_url):
    tab.show_study(study_url, study_url, "shared")
    assert _shown(tab)
    assert f"<code>tcbench dashboard --storage '{study_url}'</code>" in tab.dashboard_note.value
    url = tab.open_dashboard()
    assert url and url.startswith("http://127.0.0.1:") and url.endswith("/dashboard/studies/1"), tab.dashboard_note.value
    assert "Open the study in optuna-dashboard" in tab.dashboard_note.value and f"href='{url}'" in tab.dashboard_note.value
    assert tab.open_dashboard() == url   # the same server for the same storage
    base = url.split("/dashboard")[0]
    with urllib.request.urlopen(f"{base}/api/studies/1", timeout=30) as r:
        study = json.loads(r.read())
    assert study["name"] == "shared" and len(study["trials"]) == 2
    tab.close_dashboard()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{base}/api/studies", timeout=5)


def test_without_optuna_dashboard_the_tab_says_how_to_install_it(tab, study_url, monkeypatch):
    monkeypatch.setitem(sys.modules, "optuna_dashboard", None)   # find_spec: None; import: ImportError
    tab.show_study(study_url, study_url, "shared")
    note = tab.dashboard_note.value
    assert not _shown(tab) and "pip install 'tcbench-workbench[dashboard]'" in note and "tcbench dashboard --storage" in note
    assert tab.open_dashboard() is None and "pip install 'tcbench-workbench[dashboard]'" in tab.dashboard_note.value


def test_a_password_is_never_shown(tab):
    tab.show_study("postgresql://team:s3cret@db.example:5432/tune", "postgresql://team:***@db.example:5432/tune", "x")
    note = tab.dashboard_note.value
    assert "s3cret" not in note and "postgresql://team:***@db.example:5432/tune" in note
    assert "put the password back in place of ***" in note


@pytest.mark.parametrize("keep", [False, True])
def test_retune_keeps_the_study_in_the_store_only_when_asked(tab, monkeypatch, keep):
    calls = []

    def fake_retune(spec, **kw):
        calls.append(kw)
        stored = kw["storage"] is not None
        return types.SimpleNamespace(
            storage="sqlite:///somewhere/tcbench.db" if stored else None, study_name=kw["study_name"] or "retune-x",
            summary=lambda: pd.DataFrame({"lr": [1e-3]}), describe=lambda: "done.", prediction=None,
            prediction_note="skipped", trials=pd.DataFrame({"number": [0]}), n_pruned=0, best_lr=1e-3,
            new_batch_size=8, nothing_learned=False)

    monkeypatch.setattr(tc, "retune_lr", fake_retune)
    tab.keep_study.value = keep
    tab.run_retune().join(60)
    assert calls and calls[0]["storage"] == ("store" if keep else None), tab.message.value
    if keep:
        assert calls[0]["study_name"].startswith("panel-b4-to-b32-")   # a new study each time, never resumed
        assert "tcbench dashboard --storage 'sqlite:///somewhere/tcbench.db'" in tab.dashboard_note.value
    else:
        assert tab.dashboard_note.value == "" and not _shown(tab)
