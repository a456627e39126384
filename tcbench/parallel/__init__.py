"""Data parallelism without running it: the scaling projected per instance profile from a ring all-reduce model
(``project_scaling``, an estimate, not a measurement), its assumptions (``LinkAssumptions``) and this machine's link
fitted from measured all-reduces (``calibrate_link``). Every public name is re-exported from ``tcbench``.

Modules: ``projection`` (the model and the table), ``calibration`` (the fit), ``cli`` (``tcbench project-scaling``)."""

from .calibration import calibrate_link
from .projection import (LinkAssumptions, ScalingProjection, gradient_bytes, project_scaling, ring_allreduce_s,
                         ring_bytes_per_device)

__all__ = ["project_scaling", "ScalingProjection", "LinkAssumptions", "calibrate_link", "gradient_bytes",
           "ring_bytes_per_device", "ring_allreduce_s"]
