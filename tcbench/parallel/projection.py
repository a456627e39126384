"""Data-parallel scaling projected per instance profile: an estimate from a ring all-reduce model, not a measurement.

Ring all-reduce (each of N devices talks to its two neighbours, 2(N−1) steps): every device sends and receives
2(N−1)/N × D bytes per optimizer step, D = the gradient bytes = parameters × bytes per element at the all-reduce
precision. Mixed precision (fp16/bf16) all-reduces 2-byte gradients (SageMaker's data-parallel library runs its
AllReduce in FP16 when the gradients are FP16); fp32 all-reduces 4 bytes. BERT-large (340 M parameters) in half
precision: D = 680e6 bytes = 648 MiB, the "about 650 MB" of the reference chapter.

Time of one all-reduce (the alpha-beta model): t = 2(N−1)·α + 2(N−1)/N · D / B. Inside one instance B is the
GPU-to-GPU bandwidth of the profile (``intra_node_gbytes_s``, per device, each way) × ``intra_efficiency``; across
instances the slowest link sets the pace: B = min(intra, network), network = ``network_gbps``/8 GB/s × the
efficiency of EFA or of plain TCP on ENA (``LinkAssumptions``). A node-ordered ring (``ring_order="by-node"``, as NCCL
builds its rings) crosses each node's network once per direction, so the node's network carries one device's ring
traffic; ``"interleaved"`` divides it by the devices per node (every ring edge crosses the network: the worst case).
A hierarchical all-reduce (reduce inside the node, all-reduce across nodes, broadcast back) or NCCL's trees would do
better across nodes, chiefly in the latency term.

Step time: compute + max(0, all-reduce − overlap × compute); DDP all-reduces gradient buckets while the backward
pass still runs (backward is about 2/3 of the compute), ``overlap`` (default 0.5) is the share of the compute that
can hide communication. Scaling factor = throughput of n devices ÷ (n × throughput of one device) = compute / step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pandas as pd

from tcbench.core.profiles import Profile, profile as _profile
from tcbench.core.catalog import MODELS, approx_params
from tcbench.view.plots import LAYOUT

ALLREDUCE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
RING_ORDERS = ("by-node", "interleaved")
EFA_SETTINGS = (None, True, False, "both")
DEFAULT_PROFILES = ("ml.p3.16xlarge", "ml.p3dn.24xlarge", "ml.p4d.24xlarge")
DEFAULT_OVERLAP = 0.5
DEFAULT_BATCH, DEFAULT_SEQ_LEN = 32, 128
MIB = 2**20
_SOURCE = ("assumed, not measured: EFA (libfabric, OS bypass) reaches ~90 % of the instance's Gbps with ~15 µs "
           "per ring step; plain TCP on ENA ~50 % with ~50 µs; NVLink/PCIe inside a node at its datasheet rate with "
           "~5 µs; MFU 0.35 for the FLOPs estimate")


def bad_value(name: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"{name}={value!r} is not allowed; {allowed}")


def _check_range(name: str, value: Any, low: float, high: float = math.inf, open_low: bool = False) -> None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not number or value < low or (open_low and value == low) or value > high:
        span = f"{'>' if open_low else '>='} {low:g}" + (f" and <= {high:g}" if high < math.inf else "")
        raise bad_value(name, value, f"use a number {span}")


@dataclass(frozen=True)
class LinkAssumptions:
    """The figures the projection assumes (override any: ``LinkAssumptions(efa_efficiency=0.8)``).

    efa_* / tcp_*: the share of the instance's network Gbps an all-reduce reaches and the latency α of one ring step
    across nodes, with EFA or over plain TCP (ENA). intra_*: the same inside one node (NVLink, NVSwitch or PCIe; the
    profile's bandwidth is a datasheet peak). mfu: model-FLOPs utilisation for the compute estimate. ring_order:
    ``"by-node"`` or ``"interleaved"`` (see the module doc). measured_gbytes_s / measured_alpha_s: a link fitted on
    this machine by ``calibrate_link``; used for the ``"this-machine"`` profile only. source: where these come from.
    """

    efa_efficiency: float = 0.9
    efa_alpha_s: float = 15e-6
    tcp_efficiency: float = 0.5
    tcp_alpha_s: float = 50e-6
    intra_efficiency: float = 1.0
    intra_alpha_s: float = 5e-6
    mfu: float = 0.35
    ring_order: str = "by-node"
    measured_gbytes_s: float | None = None
    measured_alpha_s: float | None = None
    source: str = _SOURCE

    def __post_init__(self) -> None:
        for name in ("efa_efficiency", "tcp_efficiency", "intra_efficiency", "mfu"):
            _check_range(f"LinkAssumptions.{name}", getattr(self, name), 0.0, 1.0, open_low=True)
        for name in ("efa_alpha_s", "tcp_alpha_s", "intra_alpha_s"):
            _check_range(f"LinkAssumptions.{name}", getattr(self, name), 0.0)
        if self.ring_order not in RING_ORDERS:
            raise bad_value("LinkAssumptions.ring_order", self.ring_order, f"use one of {', '.join(RING_ORDERS)}")
        if (self.measured_gbytes_s is None) != (self.measured_alpha_s is None):
            raise bad_value("LinkAssumptions.measured_gbytes_s", self.measured_gbytes_s,
                       "give measured_gbytes_s and measured_alpha_s together (calibrate_link fits both)")
        if self.measured_gbytes_s is not None:
            _check_range("LinkAssumptions.measured_gbytes_s", self.measured_gbytes_s, 0.0, open_low=True)
            _check_range("LinkAssumptions.measured_alpha_s", self.measured_alpha_s, 0.0)


def gradient_bytes(params: int, precision: str = "fp16") -> int:
    """D: the bytes one device all-reduces per step (parameters × 2 bytes under AMP, × 4 in fp32)."""
    if precision not in ALLREDUCE_BYTES:
        raise bad_value("precision", precision, f"use one of {', '.join(ALLREDUCE_BYTES)}")
    return int(params) * ALLREDUCE_BYTES[precision]


def ring_bytes_per_device(grad_bytes: float, devices: int) -> float:
    """Bytes each device sends (and receives) in one ring all-reduce: 2(N−1)/N × D (0 for one device)."""
    return 0.0 if devices <= 1 else 2.0 * (devices - 1) / devices * grad_bytes


def ring_allreduce_s(grad_bytes: float, devices: int, gbytes_s: float, alpha_s: float) -> float:
    """Seconds for one ring all-reduce: 2(N−1)·α + 2(N−1)/N · D / B, B in GB/s (1e9 bytes/s); 0 for one device."""
    if devices <= 1:
        return 0.0
    return 2.0 * (devices - 1) * alpha_s + ring_bytes_per_device(grad_bytes, devices) / (gbytes_s * 1e9)


@dataclass(frozen=True)
class _Link:
    name: str
    gbytes_s: float
    alpha_s: float
    efficiency: float


def _link(p: Profile, nodes: int, efa: bool, a: LinkAssumptions) -> _Link:
    """The link that sets the pace of a ring over ``nodes`` instances of ``p`` (validated: it exists)."""
    if p.is_local:
        return _Link("measured on this machine", a.measured_gbytes_s, a.measured_alpha_s, 1.0)
    intra = None
    if p.intra_node_gbytes_s is not None:
        kind = "NVLink" if p.nvlink else "in-node"
        intra = _Link(f"{kind} {p.intra_node_gbytes_s:g} GB/s", p.intra_node_gbytes_s * a.intra_efficiency,
                      a.intra_alpha_s, a.intra_efficiency)
    if nodes == 1:
        return intra
    eff, alpha = (a.efa_efficiency, a.efa_alpha_s) if efa else (a.tcp_efficiency, a.tcp_alpha_s)
    sharing = p.accelerator_count if a.ring_order == "interleaved" else 1
    net = p.network_gbps / 8.0 * eff / sharing
    name = (f"network {p.network_gbps:g} Gbps {'EFA' if efa else 'TCP'}"
            + (f" / {sharing} devices" if sharing > 1 else ""))
    if intra is not None and intra.gbytes_s < net:
        return _Link(intra.name + " (slower than the network)", intra.gbytes_s, alpha, intra.efficiency)
    return _Link(name, net, alpha, eff)


def _device_plan(count: int, nodes: Sequence[int]) -> list[tuple[int, int]]:
    """(instances, devices) rows: with 1 in ``nodes``, also 1, 2, 4 … devices of one instance below its count."""
    plan = [(1, d) for d in (2**k for k in range(8)) if d < count] if 1 in nodes else []
    plan += [(n, n * count) for n in sorted(set(nodes))]
    return plan


def _efa_settings(p: Profile, efa: bool | str | None) -> list[bool]:
    if p.is_local:
        return [False]
    if efa is None:
        return [p.efa]
    if efa == "both":
        return [True, False] if p.efa else [False]
    return [bool(efa)]


def _compute_s(p: Profile, precision: str, params: int, tokens: int, given: Any,
               a: LinkAssumptions) -> tuple[float, str]:
    """Compute seconds per step on one device: given by the caller, else 6·P·tokens / (peak × MFU)."""
    value = given.get(p.name) if isinstance(given, Mapping) else given
    if value is not None:
        return float(value), "given"
    peak = p.peak_tflops[precision]
    return 6.0 * params * tokens / (peak * 1e12 * a.mfu), f"estimate: 6·P·tokens / ({peak:g} TFLOP/s × MFU {a.mfu:g})"


@dataclass(frozen=True)
class ScalingProjection:
    """The projected table (one row per profile, EFA setting and device count) and what it assumed.

    Columns: profile, efa, nodes (instances), devices, grad_mib (D, the gradient MiB each device all-reduces),
    ring_mib_per_device (2(N−1)/N × D, what each device sends and receives), allreduce_ms, compute_ms, step_ms,
    samples_s, scaling_factor, then epoch_h and cost_per_epoch (USD, whole instances billed) when dataset_samples was
    given, then the assumptions used: link, link_gbytes_s (B), alpha_us (α), efficiency, overlap, compute_source.
    """

    table: pd.DataFrame = field(compare=False, hash=False, repr=False)
    assumptions: LinkAssumptions
    params: int
    precision: str
    per_device_batch: int
    seq_len: int
    overlap: float

    @property
    def grad_mib(self) -> float:
        """D in MiB: the gradient bytes each device all-reduces per step."""
        return gradient_bytes(self.params, self.precision) / MIB

    def describe(self) -> str:
        """One paragraph: what was projected, from which assumptions; an estimate, not a measurement."""
        a = self.assumptions
        given = set(self.table["compute_source"]) == {"given"}
        compute = "the compute time per step you gave" if given else (
            f"compute per step estimated as 6 × parameters × tokens / (peak TFLOP/s × MFU {a.mfu:g})")
        return (
            f"An estimate, not a measurement: data-parallel scaling of {self.params / 1e6:,.0f} M parameters with "
            f"{self.precision} gradients (D = {self.grad_mib:,.0f} MiB all-reduced per step; in a ring each device "
            f"sends and receives 2(N−1)/N × D) at {self.per_device_batch} samples × {self.seq_len} tokens per device. "
            f"All-reduce time = 2(N−1)·α + 2(N−1)/N · D / B, B the slowest link: inside a node the datasheet "
            f"GPU-to-GPU bandwidth × {a.intra_efficiency:g} (α {a.intra_alpha_s * 1e6:g} µs), "
            f"across nodes the network Gbps/8 × {a.efa_efficiency:g} with EFA (α {a.efa_alpha_s * 1e6:g} µs) "
            f"or × {a.tcp_efficiency:g} over plain TCP (α {a.tcp_alpha_s * 1e6:g} µs), {a.ring_order} ring; "
            f"a hierarchical all-reduce would do better across nodes. "
            f"Step = compute + max(0, all-reduce − {self.overlap:g} × compute) (the overlap with the backward pass), "
            f"{compute}. Scaling factor = throughput of n devices ÷ (n × throughput of one). Sources: {a.source}.")

    def plot(self) -> Any:
        """Scaling factor against devices, one line per profile and EFA setting (a plotly Figure)."""
        import plotly.graph_objects as go

        fig = go.Figure(layout=dict(title="Projected data-parallel scaling (an estimate, not a measurement)<br><sub>"
                                          "scaling factor = throughput of n devices ÷ (n × one device's)</sub>",
                                    xaxis_title="devices", yaxis_title="scaling factor", xaxis_type="log",
                                    yaxis_range=[0, 1.05], **LAYOUT))
        for (name, efa), g in self.table.groupby(["profile", "efa"], sort=False):
            fig.add_scatter(x=g["devices"], y=g["scaling_factor"], mode="lines+markers",
                            name=f"{name} ({'EFA' if efa else 'no EFA'})", line_dash="solid" if efa else "dash",
                            customdata=g[["nodes", "step_ms", "allreduce_ms"]],
                            hovertemplate="%{x} devices on %{customdata[0]} instance(s): factor %{y:.2f}, step "
                                          "%{customdata[1]:.1f} ms, all-reduce %{customdata[2]:.1f} ms")
        fig.add_hline(y=1.0, line_dash="dot", line_color="grey")
        return fig


def _params_of(params: int | None, spec: Any) -> int:
    if params is not None:
        if isinstance(params, bool) or not isinstance(params, int) or params <= 0:
            raise bad_value("params", params, "use a whole number of parameters > 0")
        return params
    if spec is None:
        raise bad_value("params", None,
                        "give params= (a parameter count) or spec= (a tcbench.JobSpec of a catalog model)")

    if getattr(spec, "model", None) not in MODELS:
        raise bad_value("spec.model", getattr(spec, "model", None),
                   f"the parameter count is known for catalog models ({', '.join(MODELS)}); pass params= otherwise")
    return approx_params(spec.model, spec.size)


def _check_whole(name: str, value: Any, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad_value(name, value, "use a whole number >= 1" + (" or None" if optional else ""))


def _check_profiles(found: list[Profile], precision: str, nodes: tuple, efa: Any, compute: Any,
                    a: LinkAssumptions) -> None:
    """Everything a profile needs for the projection asked of it, checked before computing anything."""
    for p in found:
        if efa is True and not p.efa:
            raise bad_value("efa", efa,
                            f"profile {p.name!r} has no EFA; use None (follow the profile), False or 'both'")
        multi = p.accelerator_count > 1 or max(nodes) > 1
        if p.is_local and multi and a.measured_gbytes_s is None:
            raise bad_value("assumptions", a, f"profile {p.name!r} has no known link: pass "
                       "assumptions=tcbench.calibrate_link(samples) measured here")
        if not p.is_local and max(nodes) > 1 and p.network_gbps is None:
            raise bad_value("nodes", nodes, f"profile {p.name!r} has no network figure; use nodes=(1,)")
        given = compute.get(p.name) if isinstance(compute, Mapping) else compute
        if given is None and precision not in p.peak_tflops:
            raise bad_value("precision", precision,
                            f"profile {p.name!r} ({p.accelerator}) has no {precision} peak to estimate compute from: "
                            f"use one of {', '.join(p.peak_tflops) or 'none'}, or give compute_step_s")


def _check_compute(compute: Any, found: list[Profile]) -> Any:
    """compute_step_s: None, seconds > 0, or {profile name: seconds > 0} (names resolved like profile())."""
    if compute is None:
        return None
    if not isinstance(compute, Mapping):
        _check_range("compute_step_s", compute, 0.0, open_low=True)
        return float(compute)
    names = {p.name for p in found}
    out = {}
    for key, value in compute.items():
        name = _profile(key).name
        if name not in names:
            raise bad_value("compute_step_s", dict(compute), f"key {key!r} is not among profiles {sorted(names)}")
        _check_range(f"compute_step_s[{key!r}]", value, 0.0, open_low=True)
        out[name] = float(value)
    return out


def _row(p: Profile, efa: bool, nodes: int, devices: int, d_bytes: int, compute: tuple[float, str],
         batch: int, overlap: float, a: LinkAssumptions) -> dict:
    link = _link(p, nodes, efa, a) if devices > 1 else _Link("none (one device)", math.nan, 0.0, math.nan)
    ar = ring_allreduce_s(d_bytes, devices, link.gbytes_s, link.alpha_s)
    comp_s, comp_source = compute
    step = comp_s + max(0.0, ar - overlap * comp_s)
    return dict(profile=p.name, efa=efa, nodes=nodes, devices=devices, grad_mib=d_bytes / MIB,
                ring_mib_per_device=ring_bytes_per_device(d_bytes, devices) / MIB, allreduce_ms=ar * 1e3,
                compute_ms=comp_s * 1e3, step_ms=step * 1e3, samples_s=devices * batch / step,
                scaling_factor=comp_s / step, link=link.name, link_gbytes_s=link.gbytes_s,
                alpha_us=link.alpha_s * 1e6, efficiency=link.efficiency, overlap=overlap, compute_source=comp_source)


def _add_cost(df: pd.DataFrame, found: list[Profile], batch: int, dataset_samples: int) -> pd.DataFrame:
    price = {p.name: p.price_per_hour for p in found}
    steps = [math.ceil(dataset_samples / (d * batch)) for d in df["devices"]]
    at = df.columns.get_loc("scaling_factor") + 1
    df.insert(at, "epoch_h", [s * ms / 3.6e6 for s, ms in zip(steps, df["step_ms"])])
    cost = [h * n * (math.nan if price[name] is None else price[name])
            for h, n, name in zip(df["epoch_h"], df["nodes"], df["profile"])]
    df.insert(at + 1, "cost_per_epoch", cost)
    return df


def project_scaling(params: int | None = None, spec: Any = None, profiles: Sequence[str] = DEFAULT_PROFILES,
                    nodes: Sequence[int] = (1, 2, 4, 8), precision: str | None = None,
                    per_device_batch: int | None = None, seq_len: int | None = None,
                    compute_step_s: float | Mapping[str, float] | None = None, overlap: float = DEFAULT_OVERLAP,
                    efa: bool | str | None = None, assumptions: LinkAssumptions | None = None,
                    dataset_samples: int | None = None) -> ScalingProjection:
    """Project data-parallel throughput and scaling factor per profile and device count (an estimate).

    params, or spec (a catalog JobSpec: its approximate parameter count, batch_size, seq_len and precision are the
    defaults; params wins when both are given). precision: the all-reduce precision (fp16/bf16: 2 bytes, fp32: 4;
    default the spec's, else fp16). per_device_batch / seq_len: default the spec's, else 32 / 128. nodes: instances;
    with 1 among them, 1, 2, 4 … devices of one instance are projected too. compute_step_s: seconds of compute per
    step on one device (a number for every profile, or {profile: seconds}); a profile without one is estimated from
    FLOPs. efa: None follows each profile, False projects without EFA, True requires it, "both" projects EFA
    profiles with and without. dataset_samples: adds epoch hours and cost (price per hour × instances).
    ``"this-machine"``: each of ``nodes`` is one process on the link ``calibrate_link`` fitted (``assumptions=``).
    """
    a = LinkAssumptions() if assumptions is None else assumptions
    if not isinstance(a, LinkAssumptions):
        raise bad_value("assumptions", assumptions, "use a tcbench.LinkAssumptions (or None for the defaults)")
    n_params = _params_of(params, spec)
    precision = precision or getattr(spec, "precision", None) or "fp16"
    gradient_bytes(1, precision)   # checks the precision
    batch = per_device_batch if per_device_batch is not None else getattr(spec, "batch_size", DEFAULT_BATCH)
    seq = seq_len if seq_len is not None else getattr(spec, "seq_len", DEFAULT_SEQ_LEN)
    _check_whole("per_device_batch", batch)
    _check_whole("seq_len", seq)
    _check_whole("dataset_samples", dataset_samples, optional=True)
    nodes = (nodes,) if isinstance(nodes, int) else tuple(nodes)
    if not nodes or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in nodes):
        raise bad_value("nodes", nodes, "use whole numbers of instances >= 1, e.g. (1, 2, 4, 8)")
    _check_range("overlap", overlap, 0.0, 1.0)
    if efa not in EFA_SETTINGS:
        raise bad_value("efa", efa, "use None (follow the profile), True, False or 'both'")
    if isinstance(profiles, (str, Profile)):
        profiles = (profiles,)
    found = list(dict.fromkeys(_profile(name) for name in profiles))
    if not found:
        raise bad_value("profiles", profiles, "name at least one profile (tcbench.profiles())")
    compute = _check_compute(compute_step_s, found)
    _check_profiles(found, precision, nodes, efa, compute, a)
    d_bytes = gradient_bytes(n_params, precision)
    rows = [_row(p, setting, n, devices, d_bytes, _compute_s(p, precision, n_params, batch * seq, compute, a),
                 batch, overlap, a)
            for p in found for setting in _efa_settings(p, efa)
            for n, devices in _device_plan(p.accelerator_count, nodes)]
    df = pd.DataFrame(rows)
    if dataset_samples is not None:
        df = _add_cost(df, found, batch, dataset_samples)
    return ScalingProjection(table=df, assumptions=a, params=n_params, precision=precision, per_device_batch=batch,
                             seq_len=seq, overlap=float(overlap))
