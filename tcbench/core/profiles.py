"""Instance profiles: the GPU/Trainium training instances people choose between, plus this machine.

Plain data, no torch import. The catalog is ``data/profiles.json`` (or ``$TCBENCH_DATA/profiles.json``);
every figure in it names its source and is checked on load. The profile ``"this-machine"`` is read
from the host (CPU model, usable cores, memory, an NVIDIA GPU if ``nvidia-smi`` answers).
Peak TFLOP/s are dense per-device datasheet figures; prices are SageMaker on-demand USD per hour.
``intra_node_gbytes_s`` is the GPU-to-GPU bandwidth inside one instance: per device, each way, in GB/s
(1e9 bytes/s), e.g. NVLink 2.0 on a V100 SXM2 = 300 GB/s both ways together -> 150; null for one device.
"""

from __future__ import annotations

import difflib
import dataclasses
import functools
import json
import math
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


LOCAL = "this-machine"
DTYPES = ("fp32", "tf32", "fp16", "bf16")
# Figures the JSON must source (``peak_tflops`` is sourced once per accelerator).
SOURCED = ("accelerator", "accelerator_count", "memory_per_device_gib", "vcpus", "host_memory_gib",
           "network_gbps", "efa", "nvlink", "intra_node_gbytes_s", "price_per_hour", "peak_tflops")
_POSITIVE = ("accelerator_count", "memory_per_device_gib", "vcpus", "host_memory_gib", "network_gbps",
             "price_per_hour")
_HOST = "read from this host"


@dataclass(frozen=True)
class Profile:
    """One training instance (or this machine). Memory in GiB, network in Gbps, peaks per device;
    ``intra_node_gbytes_s``: GPU-to-GPU bandwidth in the instance, per device, each way, GB/s (None: one device)."""

    name: str
    family: str
    accelerator: str
    accelerator_count: int
    memory_per_device_gib: float
    vcpus: int
    host_memory_gib: float
    network_gbps: float | None = None
    network_up_to: bool = False
    efa: bool = False
    nvlink: bool = False
    intra_node_gbytes_s: float | None = None
    peak_tflops: dict = field(default_factory=dict, hash=False)
    price_per_hour: float | None = None
    price_region: str = ""
    price_date: str = ""
    sources: dict = field(default_factory=dict, hash=False)
    is_local: bool = False
    cpu: str = ""
    notes: str = ""
    written: str = ""    # when the catalog's figures were written down (prices carry their own price_date)

    @property
    def memory_budget_gb(self) -> float:
        """Memory one job may use per device, in GiB: accelerator memory, or host memory on a CPU-only host."""
        return self.memory_per_device_gib

    @property
    def label(self) -> str:
        """Short text for a dropdown, e.g. ``ml.g5.2xlarge — 1× A10G 24 GiB — $1.52/h``."""
        if self.is_local:
            text = f"this machine — {self.cpu or 'CPU'}, {self.vcpus} cores, {self.host_memory_gib:g} GiB"
            if self.accelerator != "CPU":
                text += f" + {self.accelerator_count}× {self.accelerator} {self.memory_per_device_gib:g} GiB"
            return text
        price = "no price" if self.price_per_hour is None else f"${_cents(self.price_per_hour)}/h"
        return (f"{self.name} — {self.accelerator_count}× {self.accelerator} "
                f"{self.memory_per_device_gib:g} GiB — {price}")


def _cents(usd: float) -> str:
    """Round half up to cents (1.515 -> '1.52'; a float format would give '1.51')."""
    return str(Decimal(str(usd)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def data_dir() -> Path:
    """The shipped data folder: ``$TCBENCH_DATA`` when set (a folder of your own), else the wheel's
    ``tcbench/data/``, else a checkout's ``data/`` beside the package."""
    override = os.environ.get("TCBENCH_DATA")
    if override:
        return Path(override).expanduser()
    package = Path(__file__).resolve().parents[1]
    inside = package / "data"   # an installed wheel: tcbench/data/
    return inside if (inside / "profiles.json").is_file() else package.parent / "data"


class ProfileDataError(ValueError):
    """``profiles.json`` is missing, unreadable or holds a figure that is not allowed."""


def _fail(path: Path, where: str, key: str, value: Any, allowed: str) -> None:
    raise ProfileDataError(f"{path}: {where} field {key!r} = {value!r} is not allowed; {allowed}")


def _check_number(path: Path, where: str, key: str, value: Any, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < math.inf):
        _fail(path, where, key, value, "use a number > 0" + (" or null" if optional else ""))


def _check_accelerator(path: Path, name: str, acc: dict) -> None:
    where = f"accelerator {name!r}"
    peaks = acc.get("peak_tflops")
    if not isinstance(peaks, dict) or not peaks:
        _fail(path, where, "peak_tflops", peaks, f"use an object mapping dtypes ({', '.join(DTYPES)}) to TFLOP/s")
    for dtype, value in peaks.items():
        if dtype not in DTYPES:
            _fail(path, where, f"peak_tflops.{dtype}", value, f"dtypes are {', '.join(DTYPES)}")
        _check_number(path, where, f"peak_tflops.{dtype}", value)
    sources = acc.get("sources")
    if not isinstance(sources, dict) or not str(sources.get("peak_tflops", "")).strip():
        _fail(path, where, "sources.peak_tflops", None, "name where the peak figures come from")
    names = acc.get("device_names", [])
    if not isinstance(names, list) or not all(isinstance(n, str) and n.strip() for n in names):
        _fail(path, where, "device_names", names, "use a list of the names nvidia-smi gives the datasheet's variant")


def _check_profile(path: Path, raw: dict, accelerators: dict) -> None:
    if not isinstance(raw, dict):
        _fail(path, "profiles[]", "entry", raw, "each profile is a JSON object")
    where = f"profile {raw.get('name', '?')!r}"
    if not isinstance(raw.get("sources"), dict):
        _fail(path, where, "sources", raw.get("sources"), "use an object mapping each field to its source")
    for key in ("name", "family", "accelerator"):
        if not isinstance(raw.get(key), str) or not raw.get(key):
            _fail(path, where, key, raw.get(key), "use a non-empty string")
    if raw["accelerator"] not in accelerators:
        _fail(path, where, "accelerator", raw["accelerator"], f"use one of {', '.join(sorted(accelerators))}")
    for key in _POSITIVE:
        _check_number(path, where, key, raw.get(key), optional=key in ("network_gbps", "price_per_hour"))
    for key in ("accelerator_count", "vcpus"):
        if not isinstance(raw[key], int):
            _fail(path, where, key, raw[key], "use a whole number > 0")
    for key in ("network_up_to", "efa", "nvlink"):
        if not isinstance(raw.get(key), bool):
            _fail(path, where, key, raw.get(key), "use true or false")
    _check_intra_node(path, where, raw)
    if raw.get("price_per_hour") is not None:
        for key in ("price_region", "price_date"):
            if not str(raw.get(key) or "").strip():
                _fail(path, where, key, raw.get(key), "a price needs the region and the date it was read")
    sources = {**accelerators[raw["accelerator"]]["sources"], **raw["sources"]}
    for key in SOURCED:
        if not str(sources.get(key, "")).strip():
            _fail(path, where, f"sources.{key}", sources.get(key),
                  f"every figure needs a source: add sources[{key!r}]")


def _check_intra_node(path: Path, where: str, raw: dict) -> None:
    """GPU-to-GPU GB/s (per device, each way): a number > 0 with several accelerators, null with one."""
    value = raw.get("intra_node_gbytes_s")
    if raw["accelerator_count"] == 1:
        if value is not None:
            _fail(path, where, "intra_node_gbytes_s", value, "use null: one accelerator has nothing to link")
        return
    if value is None:
        _fail(path, where, "intra_node_gbytes_s", value, f"{raw['accelerator_count']} accelerators need their "
              "GPU-to-GPU bandwidth: a number > 0 (GB/s per device, each way)")
    _check_number(path, where, "intra_node_gbytes_s", value)


def _to_profile(raw: dict, accelerators: dict) -> Profile:
    acc = accelerators[raw["accelerator"]]
    return Profile(
        name=raw["name"], family=raw["family"], accelerator=raw["accelerator"],
        accelerator_count=raw["accelerator_count"], memory_per_device_gib=float(raw["memory_per_device_gib"]),
        vcpus=raw["vcpus"], host_memory_gib=float(raw["host_memory_gib"]),
        network_gbps=None if raw.get("network_gbps") is None else float(raw["network_gbps"]),
        network_up_to=raw["network_up_to"], efa=raw["efa"], nvlink=raw["nvlink"],
        intra_node_gbytes_s=None if raw.get("intra_node_gbytes_s") is None else float(raw["intra_node_gbytes_s"]),
        peak_tflops={k: float(v) for k, v in acc["peak_tflops"].items()},
        price_per_hour=None if raw.get("price_per_hour") is None else float(raw["price_per_hour"]),
        price_region=raw.get("price_region", ""), price_date=str(raw.get("price_date", "")),
        sources={**acc["sources"], **raw["sources"]}, notes=raw.get("notes", ""))


@functools.lru_cache(maxsize=4)
def _load_catalog(path_text: str, mtime: float) -> tuple[Profile, ...]:
    path = Path(path_text)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ProfileDataError(f"cannot read the instance profiles from {path}: {exc}") from exc
    accelerators, raws = (doc.get("accelerators"), doc.get("profiles")) if isinstance(doc, dict) else (None, None)
    if not isinstance(accelerators, dict) or not isinstance(raws, list) or not raws:
        raise ProfileDataError(f"{path}: expected top-level 'accelerators' (object) and 'profiles' (non-empty list)")
    for name, acc in accelerators.items():
        if not isinstance(acc, dict):
            _fail(path, f"accelerator {name!r}", "entry", acc, "each accelerator is a JSON object")
        _check_accelerator(path, name, acc)
    seen: set[str] = set()
    for raw in raws:
        _check_profile(path, raw, accelerators)
        if raw["name"] in seen or raw["name"] == LOCAL:
            _fail(path, f"profile {raw['name']!r}", "name", raw["name"], "names must be unique and not 'this-machine'")
        seen.add(raw["name"])
    written = str(doc.get("written", ""))
    return tuple(dataclasses.replace(_to_profile(raw, accelerators), written=written) for raw in raws)


def catalog() -> tuple[Profile, ...]:
    path = data_dir() / "profiles.json"
    try:
        mtime = path.stat().st_mtime
    except OSError as exc:
        raise ProfileDataError(f"instance profiles not found at {path} (set TCBENCH_DATA to the data folder): "
                               f"{exc}") from exc
    return _load_catalog(str(path), mtime)


@functools.lru_cache(maxsize=4)
def _load_accelerators(path_text: str, mtime: float) -> dict:
    _load_catalog(path_text, mtime)   # validated there
    return json.loads(Path(path_text).read_text(encoding="utf-8"))["accelerators"]


def gpu_datasheet(device_name: str) -> tuple[str, dict, str] | None:
    """(accelerator, peak TFLOP/s per dtype, source) of the catalog's accelerator whose datasheet variant is called
    ``device_name`` (as nvidia-smi or ``torch.cuda.get_device_name`` give it: "NVIDIA H100 80GB HBM3"), or None for
    a GPU the catalog does not list (a PCIe or NVL variant has other peaks: its MFU then says there is no peak)."""
    catalog()   # a missing or broken file is its named error
    path = data_dir() / "profiles.json"
    for name, acc in _load_accelerators(str(path), path.stat().st_mtime).items():
        if device_name.strip() in acc.get("device_names", []):
            return name, {k: float(v) for k, v in acc["peak_tflops"].items()}, acc["sources"]["peak_tflops"]
    return None


def cpu_model() -> str:
    """This machine's CPU model as /proc/cpuinfo names it (else what ``platform`` says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip() or "unknown CPU"
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine() or "unknown CPU"


def _host_memory_gib() -> float:
    """MemTotal from /proc/meminfo, lowered to a cgroup memory limit when one is set."""
    total = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            limit = int(Path(limit_file).read_text().strip())
        except (OSError, ValueError):
            continue
        if 0 < limit < total or not total:
            total = float(limit)
    if not total:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return round(total / 2**30, 1)


def nvidia_gpus() -> list[tuple[str, float]]:
    """(name, GiB) per GPU from ``nvidia-smi``, or [] when there is none or it does not answer in time."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run([exe, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=5, check=True).stdout
        gpus = []
        for line in out.strip().splitlines():
            name, mib = (part.strip() for part in line.rsplit(",", 1))
            gpus.append((name, round(float(mib) / 1024, 1)))
        return gpus
    except (OSError, subprocess.SubprocessError, ValueError):
        return []


def nvidia_driver() -> str | None:
    """The NVIDIA driver's version from ``nvidia-smi``, or None when no GPU answers in time."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=5, check=True).stdout.split()
        return out[0] if out else None
    except (OSError, subprocess.SubprocessError):
        return None


@functools.lru_cache(maxsize=1)
def local_profile() -> Profile:
    """The profile of the host this process runs on (read once per process). On a GPU the catalog lists
    (``gpu_datasheet``), its datasheet peaks are this machine's MFU reference."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    memory, gpus, cpu = _host_memory_gib(), nvidia_gpus(), cpu_model()
    sheet = gpu_datasheet(gpus[0][0]) if gpus else None
    unset = "not applicable to this machine (left unset)"
    sources = dict(network_gbps=unset, efa=unset, nvlink=unset,
                   intra_node_gbytes_s=f"{unset}; tcbench.calibrate_link fits this machine's link from measurements")
    if gpus:
        sources.update(accelerator=f"{_HOST} (nvidia-smi)", accelerator_count=f"{_HOST} (nvidia-smi)",
                       memory_per_device_gib=f"{_HOST} (nvidia-smi memory.total)")
    else:
        no_gpu = f"{_HOST}: no NVIDIA GPU answered nvidia-smi, so the CPU is the device"
        sources.update(accelerator=no_gpu, accelerator_count=no_gpu,
                       memory_per_device_gib=f"{_HOST}: CPU-only, so host memory is the device memory")
    sources.update(cpu=f"{_HOST} (/proc/cpuinfo)", vcpus=f"{_HOST} (os.sched_getaffinity: cores this process may use)",
                   host_memory_gib=f"{_HOST} (/proc/meminfo MemTotal, capped by a cgroup limit)",
                   price_per_hour="no price: this machine is not rented by the hour",
                   peak_tflops=f"{sheet[2]} (the {sheet[0]} nvidia-smi names {gpus[0][0]!r})" if sheet else
                   "not known from the host; measure it (matmul probe)")
    return Profile(
        name=LOCAL, family="local", accelerator=gpus[0][0] if gpus else "CPU",
        accelerator_count=len(gpus) or 1, memory_per_device_gib=gpus[0][1] if gpus else memory,
        vcpus=cores, host_memory_gib=memory, sources=sources, is_local=True, cpu=cpu,
        peak_tflops=sheet[1] if sheet else {})


def _all() -> tuple[Profile, ...]:
    return (local_profile(), *catalog())


def profile_names() -> list[str]:
    """Every profile name, ``"this-machine"`` first."""
    return [p.name for p in _all()]


def close_matches(wanted: str, names: list[str]) -> list[str]:
    """Names that contain ``wanted`` (``"p4"`` -> the P4 profiles), then difflib's nearest, at most 3."""
    found = [n for n in names if wanted and wanted in n] if len(wanted) >= 2 else []
    for query in (wanted, "ml." + wanted):
        found += [m for m in difflib.get_close_matches(query, names, n=3, cutoff=0.6) if m not in found]
    return found[:3]


def profile(name: str | Profile) -> Profile:
    """The profile called ``name``; the ``ml.`` prefix is optional (``"g5.2xlarge"`` works)."""
    if isinstance(name, Profile):
        return name
    wanted = str(name).strip()
    by_name = {p.name: p for p in _all()}
    for candidate in (wanted, wanted.lower(), "ml." + wanted.lower()):
        if candidate in by_name:
            return by_name[candidate]
    close = close_matches(wanted.lower(), list(by_name))
    hint = f"did you mean {', '.join(repr(c) for c in close[:3])}? " if close else ""
    raise ValueError(f"profile={name!r} is not a known instance profile; {hint}"
                     f"see them all with tcbench.profiles() ({len(by_name)} profiles)")


def _row(p: Profile) -> dict:
    return {"name": p.name, "family": p.family, "accelerator": p.accelerator, "count": p.accelerator_count,
            "memory_per_device_gib": p.memory_per_device_gib, "vcpus": p.vcpus,
            "host_memory_gib": p.host_memory_gib, "network_gbps": p.network_gbps, "efa": p.efa,
            "nvlink": p.nvlink, "intra_node_gbytes_s": p.intra_node_gbytes_s,
            "peak_fp32_tflops": p.peak_tflops.get("fp32"),
            "peak_bf16_tflops": p.peak_tflops.get("bf16"), "peak_fp16_tflops": p.peak_tflops.get("fp16"),
            "price_per_hour": p.price_per_hour, "region": p.price_region or None,
            "price_date": p.price_date or None, "label": p.label}


def _source_rows(p: Profile) -> list[dict]:
    rows = []
    for key in SOURCED:
        values = {f"peak_{d}_tflops": v for d, v in p.peak_tflops.items()} if key == "peak_tflops" else \
            {key: getattr(p, key)}
        for name, value in values.items():
            date = "read now" if p.is_local else (p.price_date if key == "price_per_hour" else p.written)
            rows.append({"name": p.name, "figure": name, "value": value, "source": p.sources.get(key, ""),
                         "date": date or "not recorded"})
    return rows


def profiles(sources: bool = False) -> pd.DataFrame:
    """All profiles as a DataFrame, one row each, ``"this-machine"`` first.

    ``sources=True``: one row per (profile, figure) with its value, where it comes from and when it was written
    (a price carries its own date; this machine's figures are read now)."""
    import pandas as pd

    if sources:
        return pd.DataFrame([row for p in _all() for row in _source_rows(p)])
    return pd.DataFrame([_row(p) for p in _all()])
