"""Data parallelism: the scaling measured on this machine (``scaling``: the same job at 1, 2, … torchrun processes)
and projected per instance profile from a ring all-reduce model (``project_scaling``, an estimate, not a
measurement), its assumptions (``LinkAssumptions``) and this machine's link fitted from measured all-reduces
(``calibrate_link``). Every public name is re-exported from ``tcbench``.

Modules: ``scaling`` (measured), ``projection`` (the model and the table), ``calibration`` (the fit); the
commands ``tcbench scaling`` and ``tcbench project-scaling`` live in ``tcbench.cli.parallel``."""

from tcbench.parallel.calibration import calibrate_link, link_samples
from tcbench.parallel.scaling import ScalingResult, load_scaling, scaling
from tcbench.parallel.projection import (LinkAssumptions, ScalingProjection, gradient_bytes, project_scaling,
                                         ring_allreduce_s, ring_bytes_per_device)

__all__ = ["scaling", "ScalingResult", "load_scaling", "project_scaling", "ScalingProjection", "LinkAssumptions",
           "calibrate_link", "link_samples", "gradient_bytes", "ring_bytes_per_device", "ring_allreduce_s"]
