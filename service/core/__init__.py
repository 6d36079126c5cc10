"""The pure compute core of ComputeQuote.

Standard library only: no I/O, no environment, no clock, no database, no HTTP. Units are SI
inside, with the unit in the name (``_bytes``, ``_s``, ``_flops``, ``_flops_per_s``).

Modules:
    units        every constant and conversion, with its source
    errors       the exception hierarchy (``CoreError`` and children)
    specs        frozen input dataclasses: model, accelerator, cluster, plan, training
    params       exact parameter counts
    flops        model and hardware FLOPs per token
    memory       memory per GPU with a breakdown
    timing       step time with a breakdown into compute, communication and bubble
    calibration  the fitted constants, as data with provenance
    estimate     ``estimate()``: the whole training estimate
    presets      published model architectures
    plausibility warnings for plans nobody would run (too long, too dear)
"""

from service.core.errors import (
    CoreError,
    InfeasiblePlanError,
    InvalidSpecError,
    NoFeasiblePlanError,
)
from service.core.estimate import Estimate, estimate
from service.core.specs import (
    AcceleratorSpec,
    ClusterSpec,
    EnergySpec,
    MlpKind,
    ModelSpec,
    ParallelismPlan,
    Precision,
    RecomputeMode,
    TrainingSpec,
)

__all__ = [
    "AcceleratorSpec",
    "ClusterSpec",
    "CoreError",
    "EnergySpec",
    "Estimate",
    "InfeasiblePlanError",
    "InvalidSpecError",
    "MlpKind",
    "ModelSpec",
    "NoFeasiblePlanError",
    "ParallelismPlan",
    "Precision",
    "RecomputeMode",
    "TrainingSpec",
    "estimate",
]
