"""The panel's inputs: one widget per JobSpec field the user chooses, validated by JobSpec itself.

Validation is the engine's: the values are passed to ``tcbench.JobSpec`` and its ``SpecError`` is
shown next to the control its ``.field`` names, before anything runs.

The form shows what a first run needs — model, instance profile, batch size and the backends — and
keeps the rest under "More settings" (closed, with a one-line summary of its values). An error on a
field in there opens it, so the message is never hidden.

The default job is tiny GPT-2 (causal LM on the shipped task): its loss visibly falls from ~8.3 within
a few steps, where the tiny BERT classifier stays near ln 2 — a run that shows learning.
"""

from __future__ import annotations

import dataclasses
import html
import shlex
import threading
from typing import Any, Callable

import ipywidgets as w

import tcbench as tc

COMPILED_BACKENDS = ("inductor", "xla")
_LABEL = w.Layout(width="150px")
_ERROR_STYLE = "color:#b00020;font-size:12px"
_HINT_STYLE = "color:#555;font-size:12px"
# under "More settings"; model, profile, batch size and the backends are always shown
MORE = ("size", "seq_len", "steps", "warmup_steps", "lr", "resolve_pct", "budget_s", "rounds", "threads", "nproc",
        "precision", "padding", "debug", "stall_s", "timeout_s", "script", "script_args",
        "compile_mode", "compile_scope", "compile_optimizer", "cpp_wrapper", "cache")
# the compiler settings (their choices: tc.INDUCTOR_MODES, tc.COMPILE_SCOPES, tc.CACHE_MODES)
COMPILE_FIELDS = ("compile_mode", "compile_scope", "compile_optimizer", "cpp_wrapper", "cache")
SPEC_DEFAULTS = {f.name: f.default for f in dataclasses.fields(tc.JobSpec)}
COMPILE_HELP = ("how the inductor backend compiles (eager ignores them); the Compile search tab finds the fastest "
                "that keeps loss parity")
EAGER_TEXT = "eager (native PyTorch) — the baseline, always runs"
DEFAULT_ROUNDS, DEFAULT_RESOLVE, DEFAULT_BUDGET_S = tc.DEFAULT_ROUNDS, tc.DEFAULT_RESOLVE, tc.DEFAULT_BUDGET_S
THREADS_HELP = "1 thread per job keeps the measurement honest on a shared machine"
SCRIPT_HELP = ("your own training script (tcbench.track() or tcbench.hf.TcbenchCallback() inside, see examples/): "
               "when set, Run compares it instead of the model above, each run stopped at Steps")
NPROC_HELP = ("data-parallel processes per job on this machine (torchrun, DistributedDataParallel): the batch size "
              "is per process, the global batch = batch size × processes; processes × threads must fit the cores")
STALL_HELP = ("a job that reports nothing (no step, no phase) for max(this, 20 × its median step) seconds is "
              "stopped as stalled")


def _human_params(n: float) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.1f}B"
    if n >= 1e6:
        return f"{n / 1e6:.1f}M"
    return f"{n / 1e3:.0f}k"


def model_options(size: str) -> list[tuple[str, str]]:
    """(label, model) pairs: the label shows the family and the parameter count at ``size``."""
    df = tc.models()
    rows = df[df["size"] == size] if "size" in df.columns else df
    return [(f"{r.model}  ({r.family}, {_human_params(float(r.params))} params)", r.model)
            for r in rows.itertuples()]


def profile_label(name: str) -> str:
    """The profile's dropdown text: GPU, memory per device and $/h ("this machine — …" for the host)."""
    try:
        return tc.profile(name).label
    except Exception:  # noqa: BLE001 - a broken profile must not break the panel
        return name


def profile_options() -> list[tuple[str, str]]:
    """(label, profile name) pairs, "this machine" first (the order ``tc.profiles()`` gives)."""
    names = list(tc.profiles()["name"])
    local = [n for n in names if n == "this-machine"]
    return [(profile_label(n), n) for n in local + [n for n in names if n not in local]]


def batch_text(spec: Any) -> str:
    """``"batch 8"``, or for a data-parallel job ``"global batch 16 (8 per process × 2 processes)"``."""
    if getattr(spec, "nproc", 1) <= 1:
        return f"batch {spec.batch_size}"
    return f"global batch {spec.global_batch} ({spec.batch_size} per process × {spec.nproc} processes)"


def backend_availability() -> dict[str, tuple[bool, str]]:
    """backend -> (available, reason); every backend counts as available when the check fails."""
    try:
        df = tc.backends()
        return {r.backend: (bool(r.available), str(r.reason or "")) for r in df.itertuples()}
    except Exception:  # noqa: BLE001
        return {}


def backend_label(name: str, available: bool, reason: str) -> str:
    """The text beside a backend's box: ``"inductor — torch.compile (Inductor)"``, or why it cannot run."""
    if not available:
        return f"{name} — unavailable" + (f": {reason}" if reason else "")
    return f"{name} — {reason}" if reason else name


def compile_text(values: dict[str, Any]) -> str:
    """The compiler settings that differ from JobSpec's defaults, in words (``""`` when none does):
    ``"inductor: max-autotune · blocks · compiled optimizer · cpp_wrapper · cold cache"``."""
    optimizer = "compiled optimizer" if values["compile_optimizer"] else "eager optimizer"
    words = {"compile_mode": values["compile_mode"], "compile_scope": values["compile_scope"],
             "compile_optimizer": optimizer, "cpp_wrapper": "cpp_wrapper", "cache": f"{values['cache']} cache"}
    parts = [words[name] for name in COMPILE_FIELDS if values[name] != SPEC_DEFAULTS[name]]
    return "inductor: " + " · ".join(parts) if parts else ""


class Controls:
    """Input widgets, their error labels, and the JobSpec they describe."""

    ROUND_FIELDS = ("resolve_pct", "budget_s", "rounds")
    FIELDS = ("model", "size", "profile", "batch_size", "seq_len", "steps", "warmup_steps", "lr", "threads", "nproc",
              "precision", "padding", "debug", "stall_s", "timeout_s", "script", "script_args", *COMPILE_FIELDS)

    def __init__(self, defaults: tc.JobSpec | None = None, on_change: Callable[[], None] | None = None):
        d = defaults or tc.JobSpec()   # the demo's job: tiny GPT-2 that learns within 40 steps, 1 thread
        self._on_change = on_change
        self.owner: str | None = None    # what holds the panel (a paired run, a scaling measurement, a retune…)
        self._owner_lock = threading.Lock()
        self._owner_listeners: list[Callable[[], None]] = []
        self._job_inputs(d)
        self._compiler_inputs(d)
        self._round_inputs()
        self._backend_boxes()
        self._more_toggle()
        self._watch_inputs()
        self.error: str = ""
        self.spec: tc.JobSpec | None = None
        self.more_box = self._more_box()
        self.validate()
        self._sync_more()

    # -- the widgets -------------------------------------------------------------------------
    def _job_inputs(self, d: tc.JobSpec) -> None:
        """The JobSpec fields of the job itself, and the hints beside them."""
        self.size = w.Dropdown(options=list(tc.SIZES), value=d.size)
        self.model = w.Dropdown(options=model_options(d.size), value=d.model)
        self.profile = w.Dropdown(options=profile_options(), value=d.profile)
        self.batch_size = w.IntText(value=d.batch_size, continuous_update=False)
        self.seq_len = w.IntText(value=d.seq_len, continuous_update=False)
        self.steps = w.IntText(value=d.steps, continuous_update=False)
        self.warmup_steps = w.IntText(value=d.warmup_steps, continuous_update=False)
        self.lr = w.FloatText(value=d.lr, continuous_update=False, step=1e-6)
        self.threads = w.IntText(value=d.threads or 1, continuous_update=False, tooltip=THREADS_HELP)
        self.threads_help = w.HTML(f"<span style='{_HINT_STYLE}'>{html.escape(THREADS_HELP)}</span>")
        self.nproc = w.IntText(value=d.nproc, continuous_update=False, tooltip=NPROC_HELP)
        self.nproc_help = w.HTML(f"<span style='{_HINT_STYLE}'>1 = one process; N &gt; 1: data parallel, "
                                 "global batch = batch size × N</span>")
        self.batch_help = w.HTML("")   # the global batch, when the job is data-parallel
        self.batch_help.add_class("tcb-global-batch")
        self.precision = w.Dropdown(options=list(tc.PRECISIONS), value=d.precision)
        self.padding = w.Dropdown(options=list(tc.PADDINGS), value=d.padding)
        self.debug = w.Checkbox(value=d.debug, indent=False)
        self.stall_s = w.FloatText(value=d.stall_s, continuous_update=False, tooltip=STALL_HELP)
        self.timeout_s = w.FloatText(value=d.timeout_s or 0.0, continuous_update=False,
                                     tooltip="0: no cap (a job that keeps reporting is never killed)")
        self.script = w.Text(value=d.script or "", placeholder="e.g. examples/train_loop.py", continuous_update=False,
                             tooltip=SCRIPT_HELP, layout=w.Layout(width="320px"))
        self.script_args = w.Text(value=shlex.join(d.script_args), placeholder="its own arguments, e.g. --batch-size 8",
                                  continuous_update=False, layout=w.Layout(width="320px"))
        self.script_help = w.HTML(f"<span style='{_HINT_STYLE}'>when set, Run compares your script</span>")

    def _compiler_inputs(self, d: tc.JobSpec) -> None:
        """How the inductor backend compiles."""
        self.compile_mode = w.Dropdown(options=list(tc.INDUCTOR_MODES), value=d.compile_mode, tooltip=COMPILE_HELP)
        self.compile_scope = w.Dropdown(options=list(tc.COMPILE_SCOPES), value=d.compile_scope,
                                        tooltip="model: the whole model; blocks: each repeated "
                                                "transformer block, the rest eager; step: the whole training step")
        self.compile_optimizer = w.Checkbox(value=d.compile_optimizer, indent=False,
                                            tooltip="on: optimizer.step compiled too (foreach AdamW); off: the "
                                                    "optimizer stays eager with its fused kernel (HF Trainer's)")
        self.cpp_wrapper = w.Checkbox(value=d.cpp_wrapper, indent=False,
                                      tooltip="C++ instead of Python around Inductor's kernels: less Python per step, "
                                              "a longer compile")
        self.cache = w.Dropdown(options=list(tc.CACHE_MODES), value=d.cache,
                                tooltip="shared: the kept compile caches; cold: an empty one (an honest cold compile); "
                                        "artifacts: an empty one with this job's stored artifacts loaded first")
        self.compile_help = w.HTML(f"<span style='{_HINT_STYLE}'>{html.escape(COMPILE_HELP)}</span>")

    def _round_inputs(self) -> None:
        """How many rounds: a resolution and a time budget, or a fixed count."""
        self.resolve_pct = w.FloatText(value=DEFAULT_RESOLVE * 100, continuous_update=False,
                                       tooltip="rounds are added until every speedup's verdict at ± this many "
                                               "per cent is decided (faster, slower or no measurable difference), "
                                               "or the time budget is spent; 0: a fixed number of rounds")
        self.budget_s = w.FloatText(value=DEFAULT_BUDGET_S, continuous_update=False,
                                    tooltip="the adaptive rounds' time budget: no round starts that would end past it")
        self.rounds = w.IntText(value=DEFAULT_ROUNDS, continuous_update=False, tooltip="with ± 0: rounds alternate the "
                                "order (A B, then B A, ...); 1 is allowed but gives no run-to-run spread")

    def _backend_boxes(self) -> None:
        """A box per compiled backend (one that cannot run here is disabled, saying why); eager always runs."""
        avail = self._avail = backend_availability()
        self.backends: dict[str, w.Checkbox] = {}
        for name in COMPILED_BACKENDS:   # one per line, its name right of its box: no box sits between two names
            ok, reason = avail.get(name, (True, ""))
            cb = w.Checkbox(value=(name == "inductor" and ok), description=backend_label(name, ok, reason),
                            indent=False, disabled=not ok, layout=w.Layout(width="auto"))
            cb.add_class(f"tcb-backend-{name}")
            self.backends[name] = cb
        self.eager_text = w.HTML(f"<span style='{_HINT_STYLE}'>{html.escape(EAGER_TEXT)}</span>")
        self.eager_text.add_class("tcb-backend-eager")

    def _more_toggle(self) -> None:
        """The "More settings" button and the one-line summary of what it hides."""
        self.more = w.ToggleButton(value=False, description="More settings", icon="chevron-right",
                                   tooltip="size preset, sequence length, steps, learning rate, rounds, threads, "
                                           "data-parallel processes, precision, padding, debug log, stall timeout, "
                                           "total cap, your own script and the compiler settings",
                                   layout=w.Layout(width="auto"))
        self.more.add_class("tcb-more-settings")
        self.more_summary = w.HTML("")
        self.more_summary.add_class("tcb-more-summary")
        self.more.observe(lambda _ch: self._sync_more(), names="value")

    def _watch_inputs(self) -> None:
        """An error label per field, and every input validated again when it changes."""
        self.errors = {name: w.HTML("") for name in self.FIELDS + self.ROUND_FIELDS + ("backends",)}
        for name, err in self.errors.items():
            err.add_class(f"tcb-error-{name.replace('_', '-')}")
        for name in self.FIELDS + self.ROUND_FIELDS:
            widget = getattr(self, name)
            widget.add_class(f"tcb-{name.replace('_', '-')}")
            widget.observe(self._changed, names="value")
        for cb in self.backends.values():
            cb.observe(self._changed, names="value")
        self.size.observe(self._size_changed, names="value")
        self.rounds.observe(self._rounds_typed, names="value")

    # -- layout ------------------------------------------------------------------------------
    def _row(self, label: str, name: str, widget: w.Widget | None = None, *extra: w.Widget) -> w.HBox:
        widget = widget if widget is not None else getattr(self, name)
        widget.layout.flex = "0 0 auto"   # a long error message beside it wraps instead of squeezing the input
        return w.HBox([w.Label(label, layout=_LABEL), widget, *extra, self.errors[name]],
                      layout=w.Layout(align_items="center"))

    def _more_box(self) -> w.VBox:
        """The fields under "More settings" (hidden until it is opened)."""
        more_box = w.VBox([
            self._row("Size preset", "size"), self._row("Sequence length", "seq_len"), self._row("Steps", "steps"),
            self._row("Warmup steps", "warmup_steps"), self._row("Learning rate", "lr"),
            self._row("Resolve to ± % (0: fixed rounds)", "resolve_pct"), self._row("Time budget (s)", "budget_s"),
            self._row("Rounds (A B, B A …) when ± is 0", "rounds"),
            self._row("Threads per job", "threads", None, self.threads_help),
            self._row("Processes (data parallel)", "nproc", None, self.nproc_help),
            self._row("Precision", "precision"), self._row("Padding", "padding"), self._row("Debug log", "debug"),
            self._row("Stall timeout (s)", "stall_s"), self._row("Total cap (s, 0 = none)", "timeout_s"),
            self._row("Your script", "script", None, self.script_help), self._row("Its arguments", "script_args"),
            self._row("Compile mode", "compile_mode", None, self.compile_help),
            self._row("Compile scope", "compile_scope"), self._row("Compile optimizer.step", "compile_optimizer"),
            self._row("C++ wrapper", "cpp_wrapper"), self._row("Compile cache", "cache"),
        ], layout=w.Layout(display="none", margin="0 0 0 12px"))
        more_box.add_class("tcb-more-settings-section")
        return more_box

    def box(self) -> w.VBox:
        """Model, profile, batch size and backends, then "More settings" (closed) with the other fields."""
        backends = w.VBox([self.eager_text, *self.backends.values()])
        backends.add_class("tcb-backends")
        rows = [
            self._row("Model", "model"), self._row("Instance profile", "profile"),
            self._row("Batch size", "batch_size", None, self.batch_help),
            w.HBox([w.Label("Backends", layout=_LABEL), backends, self.errors["backends"]],
                   layout=w.Layout(align_items="flex-start")),
            w.HBox([self.more, self.more_summary], layout=w.Layout(align_items="center")),
            self.more_box,
        ]
        self.model.layout.width = "420px"
        self.profile.layout.width = "420px"
        return w.VBox(rows)

    @property
    def more_open(self) -> bool:
        """Whether the "More settings" section is open."""
        return bool(self.more.value)

    def show_more(self, open_: bool = True) -> None:
        """Open (or close) the "More settings" section."""
        self.more.value = open_

    def _sync_more(self) -> None:
        self.more_box.layout.display = "flex" if self.more.value else "none"
        self.more.icon = "chevron-down" if self.more.value else "chevron-right"
        threads, nproc, batch = self.threads.value, self.nproc.value, self.batch_size.value
        many = isinstance(nproc, int) and isinstance(batch, int) and nproc > 1 and batch >= 1
        self.batch_help.value = (f"<span style='{_HINT_STYLE}'>per process · global batch {batch * nproc} "
                                 f"({nproc} processes)</span>" if many else "")
        self.more_summary.value = (
            f"<span style='{_HINT_STYLE}'>{html.escape(str(self.size.value))} size · seq {self.seq_len.value} · "
            f"{self.steps.value} steps ({self.warmup_steps.value} warmup) · lr {self.lr.value:g} · "
            f"{self.rounds_text()} · {threads} "
            f"thread{'s' if threads != 1 else ''} per job"
            + (f" · {nproc} processes (global batch {batch * nproc})" if many else "")
            + f" · {html.escape(str(self.precision.value))}"
            + (f" · your script {html.escape(self.script.value.strip())}" if self.script.value.strip() else "")
            + (f" · {html.escape(compiled)}" if (compiled := compile_text(self.compile_values())) else "")
            + "</span>")

    # -- values ------------------------------------------------------------------------------
    def selected_backends(self) -> tuple[str, ...]:
        return tuple(n for n, cb in self.backends.items() if cb.value and not cb.disabled)

    def compile_values(self) -> dict[str, Any]:
        """The compiler settings the widgets describe (JobSpec's field names)."""
        return {name: getattr(self, name).value for name in COMPILE_FIELDS}

    def values(self) -> dict[str, Any]:
        """The JobSpec keyword arguments the widgets describe."""
        vals = {name: getattr(self, name).value for name in self.FIELDS}
        vals["lr"] = float(vals["lr"])
        vals["timeout_s"] = vals["timeout_s"] or None   # 0 in the box: no cap
        vals["script"] = vals["script"].strip() or None
        vals["script_args"] = shlex.split(vals["script_args"]) if vals["script"] else []
        if vals["script"]:
            del vals["model"]   # the runs are shown under the script's file name
        return vals

    def set(self, **values: Any) -> None:
        """Set several controls at once (``backends=("inductor",)`` ticks those boxes)."""
        if "size" in values:
            self.size.value = values.pop("size")
        if "rounds" in values:   # a number of rounds asked for: fixed, as in the API, unless ± is given too (after it)
            values["resolve_pct"] = values.pop("resolve_pct", 0.0)
        backends = values.pop("backends", None)
        if backends is not None:
            for name, cb in self.backends.items():
                cb.value = name in backends
        for name, value in values.items():
            getattr(self, name).value = value
        self.validate()

    def round_args(self) -> dict[str, Any]:
        """``tc.compare``'s rounds arguments: adaptive (``resolve``, ``budget_s``) unless ± is 0, then ``rounds``."""
        if self.resolve_pct.value:
            return dict(resolve=self.resolve_pct.value / 100, budget_s=self.budget_s.value)
        return dict(rounds=self.rounds.value)

    def rounds_text(self) -> str:
        """``"until ±5 % or 60 s"`` or ``"3 rounds"``."""
        if self.resolve_pct.value:
            return f"until ±{self.resolve_pct.value:g} % or {self.budget_s.value:g} s"
        return f"{self.rounds.value} round{'s' if self.rounds.value != 1 else ''}"

    def validate(self) -> bool:
        """Build the JobSpec; on error show the message next to the control it names."""
        for err in self.errors.values():
            err.value = ""
        self.spec, self.error = None, ""
        try:
            spec = tc.JobSpec(**self.values())
            if spec.script is not None:   # the file is checked here, not when Run is pressed
                spec = tc.preflight(spec)
            elif spec.nproc > 1:          # processes × threads must fit the cores: said here, not when Run is pressed
                tc.preflight(spec)
        except tc.SpecError as exc:
            self._show_error(str(exc), exc.field)
            return False
        except ValueError as exc:   # shlex: an unclosed quote in the script's arguments
            self._show_error(f"script_args: {exc}", "script_args")
            return False
        if not self.selected_backends():
            self._show_error("backends: tick at least one compiled backend (inductor or xla) to pair with eager",
                             "backends")
            return False
        if not isinstance(self.rounds.value, int) or self.rounds.value < 1:
            self._show_error(f"rounds={self.rounds.value!r} is not allowed; it must be a whole number >= 1", "rounds")
            return False
        if not 0 <= self.resolve_pct.value < 100:
            self._show_error(f"resolve_pct={self.resolve_pct.value!r} is not allowed; it must be from 0 "
                             "(a fixed number of rounds) to below 100 per cent", "resolve_pct")
            return False
        if self.resolve_pct.value and not self.budget_s.value > 0:
            self._show_error(f"budget_s={self.budget_s.value!r} is not allowed; it must be above 0 seconds", "budget_s")
            return False
        self.spec = spec
        return True

    def _show_error(self, message: str, field: str) -> None:
        self.error = message
        target = self.errors.get(field)
        if target is None:  # a field without a control of its own (memory_budget_gb): beside the profile
            target = self.errors["profile"]
        target.value = f"<span style='{_ERROR_STYLE}'>⚠ {html.escape(message)}</span>"
        if field in MORE:   # the field is under "More settings": open it so the message is seen
            self.more.value = True

    def _size_changed(self, change: dict) -> None:
        current = self.model.value
        self.model.options = model_options(change["new"])
        if current in [v for _, v in self.model.options]:
            self.model.value = current

    def _rounds_typed(self, _change: dict) -> None:
        """A number of rounds typed is a number of rounds run: ± goes to 0 (fixed rounds), as ``compare(rounds=…)``
        does; a user who typed 1 once got the adaptive default's six rounds."""
        self.resolve_pct.value = 0.0

    def _changed(self, _change: dict) -> None:
        self.validate()
        self._sync_more()
        if self._on_change is not None:
            self._on_change()

    # -- one measurement at a time: the tabs share these controls and the machine's cores -------------------
    def claim(self, what: str) -> str:
        """Take the panel for ``what`` (the controls locked, every tab's start buttons off): "" when taken,
        else the name of what holds it (two measurements at once would disturb each other's timings)."""
        with self._owner_lock:
            if self.owner is not None:
                return self.owner
            self.owner = what
        self.set_disabled(True)
        self._tell_owners()
        return ""

    def release(self) -> None:
        with self._owner_lock:
            self.owner = None
        self.set_disabled(False)
        self._tell_owners()

    def on_owner(self, callback: Callable[[], None]) -> None:
        """``callback()`` whenever the panel is claimed or released (a tab syncs its buttons)."""
        self._owner_listeners.append(callback)

    def _tell_owners(self) -> None:
        for callback in list(self._owner_listeners):
            callback()

    def busy_text(self) -> str:
        return f"The {self.owner} is running: wait for it or press its Stop." if self.owner else ""

    def set_disabled(self, disabled: bool) -> None:
        for name in self.FIELDS + self.ROUND_FIELDS:
            getattr(self, name).disabled = disabled
        for name, cb in self.backends.items():
            cb.disabled = disabled or not self._avail.get(name, (True, ""))[0]
