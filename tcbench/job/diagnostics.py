"""What the compiler did and where: graph breaks, recompilations, CPU fallbacks and host transfers.

Runs inside the job process (or a user's own training script), never in a subprocess of its own:

    diag = backend.collector()        # before torch.compile (xla: after the device exists)
    for batch in batches:
        with diag.step(batch):        # optional: input shapes, what each step compiled or transferred
            ...                       # forward, backward, optimizer step (xla: and torch_xla.sync())
    data = diag.collect()             # plain JSON-able data, see ``Collector.collect``

Inductor (``DynamoCollector``): dynamo's own records — every graph break with its reason and user frame
(``torch._dynamo.utils.graph_break_reasons``) and every recompilation with the guard that failed
(dynamo's compilation metrics). XLA (``XlaCollector``): the metrics of ``torch_xla.debug.metrics`` — compiles
against the distinct input shapes, graph executions per step, device→host transfers (``.item()``,
``print(tensor)``) and ops that fell back to the CPU. Each finding carries a line of advice from the README's
checklist ("When compiling does not pay"). ``table`` turns stored diagnostics into a DataFrame (no torch import).
"""

from __future__ import annotations

import contextlib
import linecache
import os
import re
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, Iterable, Iterator

if TYPE_CHECKING:
    import pandas as pd


KINDS = ("graph break", "recompile", "fallback", "host transfer")
_MAX_ENTRIES = 40
_METRICS_LIMIT = 1024      # dynamo keeps its last 64 compilation records by default
_NOWHERE = ("", None, "")   # a finding the compiler gives no source place for
_ITEM = "aten::_local_scalar_dense"   # XLA's op behind .item(), float(tensor) and if tensor
LOCATE_STEPS = 2           # xla: the first steps run under a torch-function mode that notes where values are read
# tensor methods that read a device value on the host, as people write them
_HOST_READS = {"item": ".item()", "__bool__": "a Python if/bool() on a tensor", "__float__": "float(tensor)",
               "__int__": "int(tensor)", "__index__": "a tensor used as an index", "tolist": ".tolist()",
               "cpu": ".cpu()", "numpy": ".numpy()", "__repr__": "print(tensor) / str(tensor)",
               "__format__": "print(tensor) / an f-string of a tensor"}

PAD = "pad to a fixed length (padding='max_length') or bucket a few lengths (padding='bucket')"
NO_SYNC = ("no .item(), float(tensor) or print(tensor) inside the step: keep values as tensors and read them "
           "every k steps, after the step")
MARK_STEP = ("one torch_xla.sync() (xm.mark_step()) per step, after optimizer.step(), and nothing that cuts the graph "
             "before it")


def _shapes(batch: Any) -> tuple | None:
    """The batch's tensor shapes as a hashable signature (names in order), or None when it has none."""
    if batch is None:
        return None
    items = (batch.items() if isinstance(batch, dict)
             else enumerate(batch if isinstance(batch, (list, tuple)) else [batch]))
    sig = tuple((str(k), tuple(int(d) for d in v.shape)) for k, v in items if hasattr(v, "shape"))
    return sig or None


def shape_text(shapes: dict) -> str:
    """``{"input_ids": [8, 64]}`` -> ``"input_ids 8×64"``."""
    return ", ".join(f"{k} {'×'.join(str(d) for d in v) or 'scalar'}" for k, v in shapes.items())


class Collector:
    """One job's diagnostics: made by the backend's ``collector()`` before compiling, ``collect()`` at the end.
    ``backend`` names the backend in the collected data. This one reads no compiler: it finds nothing."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.steps = 0
        self.shapes: dict[tuple, dict] = {}       # signature -> {"steps", "first_step", "compiles"}
        self.seen_recompiles: list[int] = []      # steps that compiled at a shape already seen
        self.compile_steps: list[tuple[int, int]] = []   # (start time ns, step) of every step that compiled
        self.gb_steps: list[tuple[int, int]] = []        # (graph-break record index, step that made it)
        self.in_step: Counter = Counter()         # xla: transfers and fallback ops inside the steps
        self.transfer_steps: list[int] = []
        self.host_reads: dict[tuple, dict] = {}    # xla: (file, line, function, method) -> {"count", "first_step"}
        self.t0_ns = time.time_ns()
        self.base = self._read()

    # -- reading the compiler's counters (cheap: called around every step) ----------------------------------
    def _read(self) -> dict[str, Any]:
        """The compiler's counters now ({} for no compiler: the steps are then not followed)."""
        return {}

    def _watch(self, index: int) -> Any:
        """A context around step ``index`` that notes more than the counters say (none here)."""
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def step(self, batch: Any = None) -> Iterator[None]:
        """Wrap one training step: records its input shapes and what it compiled, executed and transferred."""
        index, start, before = self.steps, time.time_ns(), self._read()
        try:
            with self._watch(index):
                yield
        finally:
            self.steps += 1
            self._after_step(index, start, before, self._read(), _shapes(batch))

    def _after_step(self, index: int, start: int, before: dict, after: dict, sig: tuple | None) -> None:
        if not before:
            return
        compiled = after["compiles"] - before["compiles"]
        if compiled:
            self.compile_steps.append((start, index))
        if sig is not None:
            seen = self.shapes.get(sig)
            if seen is None:
                self.shapes[sig] = {"steps": 1, "first_step": index, "compiles": compiled}
            else:
                seen["steps"] += 1
                seen["compiles"] += compiled
                if compiled and index > 1:   # step 1 is the first with optimizer state: a second graph is expected
                    self.seen_recompiles.append(index)
        if "breaks" in after and after["breaks"] > before["breaks"]:
            self.gb_steps.append((before["breaks"], index))
        if "transfers" in after:
            moved = after["transfers"] - before["transfers"]
            self.in_step["transfers"] += moved
            if moved:
                self.transfer_steps.append(index)
            for op, n in after["fallbacks"].items():
                self.in_step[op] += n - before["fallbacks"].get(op, 0)

    # -- the findings ------------------------------------------------------------------------------------------
    def collect(self) -> dict[str, Any]:
        """Plain data: ``backend``, ``steps`` (wrapped by ``step``), ``compiles``, ``graph_breaks``,
        ``recompiles``, ``host_transfers``, ``fallback_ops``, ``shapes`` (one dict per distinct input shape:
        ``shapes``, ``steps``, ``first_step``, ``compiles``), ``entries`` (one dict per finding: ``kind`` in
        KINDS, ``file``, ``line``, ``function``, ``code``, ``why``, ``count``, ``first_step``, ``advice``),
        ``advice`` (the distinct advice lines) and ``summary`` (one line for people, made from the data).
        Never raises: a failure to read the compiler is an ``error`` field."""
        data: dict[str, Any] = {"backend": self.backend, "steps": self.steps,
                                "shapes": [{"shapes": {k: list(v) for k, v in sig}, **info}
                                           for sig, info in self.shapes.items()]}
        try:
            entries = self._findings(data)
        except Exception as exc:  # noqa: BLE001 - diagnostics must never fail the job that measured
            entries, data["error"] = [], f"{type(exc).__name__}: {exc}"[:500]
        entries.sort(key=lambda e: (KINDS.index(e["kind"]), -e["count"]))
        data["entries"] = entries[:_MAX_ENTRIES]
        data["advice"] = list(dict.fromkeys(e["advice"] for e in entries if e["advice"]))
        data["summary"] = summary_line(data)
        return data

    def _step_of(self, time_ns: int | None) -> int | None:
        """The step during which something that started at ``time_ns`` happened (None outside the steps)."""
        steps = [s for t, s in self.compile_steps if time_ns is not None and t <= time_ns]
        return steps[-1] if steps else None

    def _findings(self, data: dict) -> list[dict]:
        """Fill in ``data``'s compiler fields and return the findings (none without a compiler)."""
        return []


class DynamoCollector(Collector):
    """torch.compile's diagnostics, from dynamo's records: graph breaks and recompiles, with their places."""

    def __init__(self, backend: str) -> None:
        from torch._dynamo import utils

        if utils._compilation_metrics.maxlen is not None and utils._compilation_metrics.maxlen < _METRICS_LIMIT:
            utils.set_compilation_metrics_limit(_METRICS_LIMIT)
        super().__init__(backend)

    def _read(self) -> dict[str, Any]:
        from torch._dynamo.utils import counters, graph_break_reasons

        return {"compiles": int(counters["stats"].get("unique_graphs", 0)), "breaks": len(graph_break_reasons)}

    def _findings(self, data: dict) -> list[dict]:
        from torch._dynamo.utils import counters, get_compilation_metrics, graph_break_reasons

        now = self._read()
        data["compiles"] = now["compiles"] - self.base["compiles"]
        found: dict[tuple, dict] = {}
        records = list(enumerate(graph_break_reasons[self.base["breaks"]:], start=self.base["breaks"]))
        # dynamo records a break inside an inlined call twice: with its reason, then as "step_unsupported" in the
        # caller's frame once it restarted the trace; keep the one that says why
        inner = {(f.filename, f.lineno) for _, r in records if r.reason != "step_unsupported" for f in r.user_stack}
        for i, reason in records:
            if reason.reason == "step_unsupported" and reason.user_stack and \
                    (reason.user_stack[-1].filename, reason.user_stack[-1].lineno) in inner:
                continue
            frame = reason.user_stack[-1] if reason.user_stack else None
            where = (frame.filename, frame.lineno, frame.name) if frame else _NOWHERE
            why = reason.reason.strip().splitlines()[0] if reason.reason.strip() else "unknown"
            first = max((s for idx, s in self.gb_steps if idx <= i), default=None)
            _add(found, "graph break", where, why, first, detail=reason.reason,
                 advice=_break_advice(reason.reason, where))
        data["graph_breaks"] = sum(e["count"] for e in found.values())
        recompiles = 0
        for m in get_compilation_metrics():
            if (m.start_time_us or 0) * 1000 < self.t0_ns:
                continue
            where = (m.co_filename or "", m.co_firstlineno, m.co_name or "")
            limit = m.fail_type is not None and "RecompileLimit" in m.fail_type
            if m.recompile_reason is None and not limit:
                continue
            recompiles += 1
            why = re.sub(r"^\d+/\d+: ", "", " ".join((m.recompile_reason or "").split()))[:300]
            if limit:
                why = f"recompile limit reached: this function now runs uncompiled (last guard that failed: {why})"
            _add(found, "recompile", where, why or "unknown guard", self._step_of((m.start_time_us or 0) * 1000),
                 advice=self._recompile_advice(why))
        data["recompiles"] = recompiles
        data["host_transfers"], data["fallback_ops"] = None, None
        data["dynamo_graph_break_counter"] = int(sum(counters["graph_break"].values()))
        return list(found.values())

    def _recompile_advice(self, why: str) -> str:
        if "size mismatch" in why or "stride mismatch" in why or len(self.shapes) > 1:
            return (f"{len(self.shapes)} input shape(s): {PAD}; or mark the length dynamic "
                    "(torch._dynamo.mark_dynamic) so one graph serves all")
        if "==" in why:
            return ("a Python value the graph depends on changed (a .item() result, a step counter, a flag): "
                    "pass it as a tensor or keep it constant")
        return "keep what the failed guard checks constant between steps"


class XlaCollector(Collector):
    """PyTorch/XLA's diagnostics, from its metrics: compiles per input shape, executions per step, host transfers
    (where the first steps read values) and CPU fallbacks."""

    def _read(self) -> dict[str, Any]:
        import torch_xla.debug.metrics as met

        execs, transfers = met.metric_data("ExecuteTime"), met.metric_data("TransferFromDeviceTime")
        return {"compiles": int(met.counter_value("UncachedCompile") or 0),
                "executions": int(execs[0]) if execs else 0, "transfers": int(transfers[0]) if transfers else 0,
                "fallbacks": {op: int(met.counter_value(op) or 0) for op in met.executed_fallback_ops()}}

    def _watch(self, index: int) -> Any:
        return _host_read_mode(self, index) if index < LOCATE_STEPS else contextlib.nullcontext()

    def _findings(self, data: dict) -> list[dict]:
        import torch_xla.core.xla_model as xm

        xm.wait_device_ops()   # executions finish asynchronously: the last step's must be counted
        now = self._read()
        stepped = self.steps
        transfers = self.in_step["transfers"] if stepped else now["transfers"] - self.base["transfers"]
        fallbacks = ({op: n for op, n in self.in_step.items() if op.startswith("aten::")} if stepped else
                     {op: n - self.base["fallbacks"].get(op, 0) for op, n in now["fallbacks"].items()})
        fallbacks = {op: n for op, n in fallbacks.items() if n > 0}
        executions = now["executions"] - self.base["executions"]
        data.update(compiles=now["compiles"] - self.base["compiles"], executions=executions,
                    # executions finish asynchronously (after the step, in its sync): per step over the whole job
                    executions_per_step=round(executions / stepped, 2) if stepped else None,
                    host_transfers=transfers, fallback_ops=sum(n for op, n in fallbacks.items() if op != _ITEM),
                    host_transfers_outside_steps=(now["transfers"] - self.base["transfers"] - transfers
                                                  if stepped else None))
        found: dict[tuple, dict] = {}
        self._xla_recompiles(found, data["compiles"])
        data["recompiles"] = sum(e["count"] for e in found.values())
        self._xla_transfers(found, transfers, fallbacks.get(_ITEM, 0), stepped)
        for op, n in fallbacks.items():
            if op != _ITEM:
                _add(found, "fallback", _NOWHERE,
                     f"{op} has no XLA lowering here: it ran on the CPU (a device→host→device round trip)", None,
                     count=n, advice=f"replace {op} by an op XLA lowers, or move it out of the step")
        cuts = round(data["executions_per_step"] or 1) - 1
        data["graph_breaks"] = cuts if stepped and cuts > 0 and not transfers else 0
        if data["graph_breaks"]:
            _add(found, "graph break", _NOWHERE, f"{cuts + 1} graph executions per step (expected 1): something cuts "
                 "the step's graph", None, count=cuts, advice=MARK_STEP)
        return list(found.values())

    def _xla_recompiles(self, found: dict, compiles: int) -> None:
        """A compile at every new input shape after the first, and at shapes already seen (after step 1)."""
        first = min(self.shapes.values(), key=lambda s: s["first_step"], default=None)
        for sig, info in self.shapes.items():
            if info is not first and info["compiles"]:
                _add(found, "recompile", _NOWHERE, f"new input shape {shape_text(dict(sig))}", info["first_step"],
                     count=info["compiles"], advice=f"{len(self.shapes)} input shapes → {compiles} compiles: {PAD}")
        if self.seen_recompiles:
            _add(found, "recompile", _NOWHERE, "compiled again at an input shape already seen", self.seen_recompiles[0],
                 count=len(self.seen_recompiles), advice=f"the graph changes between steps: {NO_SYNC}; {MARK_STEP}")

    def _xla_transfers(self, found: dict, transfers: int, items: int, stepped: int) -> None:
        """Device→host transfers inside the steps: where the first steps read values, then the total."""
        for (file, line, function, method), seen in self.host_reads.items():
            _add(found, "host transfer", (file, line, function), f"{_HOST_READS[method]} reads a device value on the "
                 f"host ({seen['count']}× in the first {LOCATE_STEPS} steps): the step waits for the device and its "
                 "graph is cut", seen["first_step"], count=seen["count"], advice=NO_SYNC)
        if transfers:
            cause = f"{items} of them .item(), float(tensor) or if tensor (aten::_local_scalar_dense)" if items else \
                "print(tensor), .cpu() or .tolist()"
            per = f", {transfers / stepped:.2g} per step" if stepped else ""
            hint = "" if self.host_reads else " (PT_XLA_DEBUG_LEVEL=2 prints the Python line)"
            _add(found, "host transfer", _NOWHERE, f"{transfers} device→host transfer(s) inside the steps in all{per}: "
                 f"{cause}", self.transfer_steps[0] if self.transfer_steps else None, count=transfers,
                 advice=NO_SYNC + hint)


def _library_dirs() -> tuple[str, ...]:
    """Folders whose frames are not the caller's code: torch, torch_xla, contextlib and this module."""
    import torch

    dirs = [os.path.dirname(torch.__file__), os.path.dirname(contextlib.__file__) + os.sep + "contextlib.py", __file__]
    try:
        import torch_xla

        dirs.append(os.path.dirname(torch_xla.__file__))
    except ImportError:
        pass
    return tuple(dirs)


def _caller_frame(skip: tuple[str, ...]) -> tuple[str, int, str] | None:
    """The innermost frame outside torch/torch_xla (the code that asked for the value)."""
    import sys

    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame = frame.f_back
    return None if frame is None else (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


def _host_read_mode(collector: Collector, step: int) -> Any:
    """A torch-function mode that notes where a step reads an XLA tensor's value on the host (the first steps
    only: every torch call pays a Python hop while it is on)."""
    from torch.overrides import TorchFunctionMode

    skip = _library_dirs()

    class HostReads(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            if name in _HOST_READS and args and getattr(getattr(args[0], "device", None), "type", "") == "xla":
                where = _caller_frame(skip)
                if where is not None:
                    seen = collector.host_reads.setdefault((*where, name), {"count": 0, "first_step": step})
                    seen["count"] += 1
            return func(*args, **(kwargs or {}))

    return HostReads()


def _origin(file: str) -> str:
    """The installed package a frame's file belongs to ("transformers", "torch"), "" for the caller's own code."""
    parts = file.replace(os.sep, "/").split("/")
    for marker in ("site-packages", "dist-packages"):
        if marker in parts and parts.index(marker) + 1 < len(parts):
            return parts[parts.index(marker) + 1].removesuffix(".py")
    return ""


def _add(found: dict, kind: str, where: tuple, why: str, first_step: int | None, count: int = 1,
         detail: str = "", advice: str = "") -> None:
    """Count one finding, grouped by kind, place and reason."""
    key = (kind, *where, why)
    if key in found:
        found[key]["count"] += count
        return
    file, line, function = where
    code = linecache.getline(file, line).strip() if file and line else ""
    origin = _origin(file) if file else ""
    if origin and advice:
        advice = f"in {origin} (not your code): {advice}"
    found[key] = {"kind": kind, "file": file, "line": line, "function": function, "code": code, "origin": origin,
                  "why": why, "count": count, "first_step": first_step, "advice": advice, "detail": detail[:1500]}


def _break_advice(reason: str, where: tuple) -> str:
    """The checklist line for one dynamo graph break (by dynamo's graph-break type, its reason's first line)."""
    kind = reason.strip().splitlines()[0] if reason.strip() else ""
    file, _, function = where
    if function == "_use_grad" and "/torch/optim/" in file.replace(os.sep, "/"):
        return "expected: torch.optim breaks the graph here on purpose (the compiled optimizer step is its own graph)"
    if "item()" in kind or "scalar" in kind.lower():
        return f"{NO_SYNC} (or torch._dynamo.config.capture_scalar_outputs = True)"
    if "Logger" in kind:
        return "a logger call in the step: silence it, or add the method to torch._dynamo.config.ignore_logger_methods"
    if "print" in reason[:300]:
        return f"{NO_SYNC} (or add print to torch._dynamo.config.reorderable_logging_functions)"
    if "graph_break()" in kind:
        return "remove the torch._dynamo.graph_break() call"
    if "Data-dependent" in kind or "jump" in kind:
        return "a Python branch on a tensor value: use torch.where / torch.cond, or decide before the step"
    return "move this call out of the compiled step, or rewrite it with ops dynamo traces"


# -- for people: a line and a table -------------------------------------------------------------------------
def where_text(entry: dict) -> str:
    """``"model.py:12 forward"`` for an entry with a place; ``"step 5"`` or ``""`` when the compiler gave none."""
    if entry.get("file"):
        return f"{os.path.basename(entry['file'])}:{entry.get('line')} {entry.get('function') or ''}".strip()
    return "" if entry.get("first_step") is None else f"step {entry['first_step']}"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


_TOTALS = {"graph break": "graph_breaks", "recompile": "recompiles", "fallback": "fallback_ops",
           "host transfer": "host_transfers"}


def summary_line(data: dict) -> str:
    """One line from the collected data: the count of each kind, with the first place it happened."""
    if data.get("error"):
        return f"diagnostics failed: {data['error']}"
    parts = []
    for kind in KINDS:
        entries = [e for e in data.get("entries", []) if e["kind"] == kind]
        n = data.get(_TOTALS[kind]) or sum(e["count"] for e in entries)
        if n:   # the place shown: the caller's own code before a library's, then the most counted
            placed = sorted((e for e in entries if e.get("file")), key=lambda e: bool(e.get("origin")))
            others = len(placed) - 1
            place = f"at {where_text(placed[0])}" + (f" and {_plural(others, 'other place')}" if others > 0 else "") \
                if placed else (f"first at {where_text(entries[0])}" if entries and where_text(entries[0]) else "")
            parts.append(_plural(n, kind) + (f" ({place})" if place else ""))
    if not parts:
        parts.append("no graph breaks, recompiles, fallbacks or host transfers")
    if data.get("shapes"):
        parts.append(_plural(len(data["shapes"]), "input shape"))
    return "; ".join(parts)


TABLE_COLUMNS = ["backend", "round", "run_id", "kind", "where", "why", "count", "first_step", "advice", "code",
                 "file", "line", "function"]


def table(x: Any) -> pd.DataFrame:
    """Every finding of a Comparison, a JobResult or a list of JobResults: one row per (job, kind, place,
    reason) with ``where`` ("file:line function"), ``why``, ``count`` and ``advice``."""
    import pandas as pd   # not at the top: the job\'s process imports this module

    results: Iterable[Any] = getattr(x, "results", None) or ([x] if hasattr(x, "extra") else list(x))
    rows = [{"backend": r.name, "round": r.round, "run_id": r.run_id, **entry, "where": where_text(entry)}
            for r in results for entry in r.extra.diagnostics.get("entries", [])]
    return pd.DataFrame(rows, columns=TABLE_COLUMNS)


def top(df: pd.DataFrame, backend: str | None = None, n: int | None = None) -> pd.DataFrame:
    """Each distinct finding once (from the first round that has it), kinds in KINDS order, most counted first;
    only ``backend``'s when given, at most ``n``."""
    if backend is not None:
        df = df[df["backend"] == backend]
    df = df.sort_values("round", kind="stable").drop_duplicates(["backend", "kind", "where", "why"])
    df = df.assign(_k=df["kind"].map(KINDS.index)).sort_values(["_k", "count"], ascending=[True, False], kind="stable")
    return df.drop(columns="_k").head(n if n is not None else len(df)).reset_index(drop=True)


def lines(df: pd.DataFrame, backend: str, n: int = 3) -> list[str]:
    """For a terminal: ``graph break ×2 at model.py:12 forward `torch._dynamo.graph_break()` — why → advice``."""
    out = []
    for e in top(df, backend, n).to_dict("records"):
        at = f" at {e['where']}" if e["where"] else ""
        code = f" `{e['code']}`" if e.get("code") else ""
        out.append(f"{e['kind']} ×{e['count']}{at}{code} — {e['why']}" + (f" → {e['advice']}" if e["advice"] else ""))
    rest = len(top(df, backend)) - len(out)
    if rest > 0:
        out.append(f"... and {rest} more (Comparison.diagnostics())")
    return out
