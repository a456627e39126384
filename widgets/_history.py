"""History tab: earlier comparisons from the store; selecting one redraws it without rerunning (a data-parallel
scaling measurement on the Data parallel tab, every other kind on the Run tab)."""

from __future__ import annotations

import datetime as dt
import html
from typing import Any, Callable

import ipywidgets as w
import pandas as pd

import tcbench as tc

_SHOWN = ("comparison_id", "created", "kind", "model", "size", "backends", "rounds", "status")


def _when(value: Any) -> str:
    try:
        return dt.datetime.fromtimestamp(float(value)).strftime("%Y-%m-%d %H:%M:%S")
    except (TypeError, ValueError, OverflowError, OSError):
        return str(value)


def history_frame() -> pd.DataFrame:
    """``tc.comparisons()`` newest first, with a readable ``created`` column (none yet: no store made)."""
    try:
        df = tc.comparisons()
    except tc.StoreMissing:   # nothing was ever written: an empty history, and reading does not create a store
        df = None
    if df is None or len(df) == 0:
        return pd.DataFrame(columns=list(_SHOWN))
    df = df.copy()
    if "created" in df.columns:
        df["created"] = [_when(v) for v in df["created"]]
    if "comparison_id" in df.columns:
        df = df.sort_values("comparison_id", ascending=False)
    return df[[c for c in _SHOWN if c in df.columns]]


class History:
    """A refreshable table of comparisons and a picker; ``on_load(comparison)`` is called on selection, or
    ``on_scaling(scaling_result)`` for a stored ``tc.scaling`` measurement (kind "scaling")."""

    def __init__(self, on_load: Callable[[Any], None], on_scaling: Callable[[Any], None] | None = None):
        self._on_load = on_load
        self.on_scaling = on_scaling
        self.refresh_button = w.Button(description="Refresh", icon="refresh")
        self.refresh_button.add_class("tcb-history-refresh")
        self.picker = w.Dropdown(options=[("— choose a comparison —", None)], value=None,
                                 layout=w.Layout(width="520px"))
        self.picker.add_class("tcb-history-picker")
        self.load_button = w.Button(description="Show", button_style="info")
        self.load_button.add_class("tcb-history-load")
        self.table = w.HTML("")
        self.table.add_class("tcb-history-table")
        self.message = w.HTML("")
        self.refresh_button.on_click(lambda _b: self.refresh())
        self.load_button.on_click(lambda _b: self.load(self.picker.value))
        self.picker.observe(lambda ch: ch["new"] is not None and self.load(ch["new"]), names="value")
        self.box = w.VBox([w.HBox([self.picker, self.load_button, self.refresh_button]), self.message, self.table])
        self.box.add_class("tcb-history")

    def refresh(self) -> pd.DataFrame:
        try:
            df = history_frame()
        except Exception as exc:  # noqa: BLE001 - an unreadable store is a message, not a crash
            self.message.value = f"<span style='color:#b00020'>Could not read the store: {html.escape(str(exc))}</span>"
            return pd.DataFrame()
        options = [("— choose a comparison —", None)]
        for row in df.to_dict("records"):
            label = (f"#{row.get('comparison_id')} · {row.get('created', '')} · {row.get('model', '')} "
                     f"({row.get('size', '')}) · {row.get('backends', '')} · {row.get('status', '')}")
            options.append((label, int(row["comparison_id"])))
        self.picker.options = options  # (resets the value to the first option, None: no reload)
        self.table.value = (df.to_html(index=False, classes="tcb-table", border=0) if len(df)
                            else "<i>No comparisons in the store yet: run one on the Run tab.</i>")
        return df

    def load(self, comparison_id: int | None) -> Any:
        if comparison_id is None:
            self.message.value = "<i>Choose a comparison first.</i>"
            return None
        try:
            cmp = tc.load_comparison(int(comparison_id))
            if cmp.kind == "scaling" and self.on_scaling is not None:
                result = tc.load_scaling(int(comparison_id))
                self.message.value = (f"Showing scaling measurement #{comparison_id} on the Data parallel tab (from "
                                      "the store, not rerun).")
                self.on_scaling(result)
                return result
        except Exception as exc:  # noqa: BLE001
            self.message.value = (f"<span style='color:#b00020'>Could not load comparison #{comparison_id}: "
                                  f"{html.escape(str(exc))}</span>")
            return None
        self.message.value = f"Showing comparison #{comparison_id} (from the store, not rerun)."
        self._on_load(cmp)
        return cmp
