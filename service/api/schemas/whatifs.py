"""``POST /v1/what-ifs``: one estimate body and its variations, and their answers side by side.

A variation is a mapping of dotted field paths of the estimate request to values
(``{"cluster.num_gpus": 2048, "parallelism.dp": 64}``). Its paths are checked against the
estimate request's pydantic model, field by field and recursively, before any work
(:func:`path_problem`), so a typo is a 422 for the request naming the variation and the path,
and a field added to the estimate request later is a valid path without a change here. Its
values are checked by validating the varied body as an ``EstimateRequest``, as
``POST /v1/estimates`` would: an invalid value is that variation's coded error in the answer.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Self, Union

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from service.api.problems import FieldError
from service.api.schemas.common import RequestModel, TextRule
from service.api.schemas.estimate import ESTIMATE_EXAMPLE, EstimateRequest
from service.api.schemas.prices import PricePerGpuHour

MAX_VARIATIONS = 64
"""Variations per request: with the base, 65 estimates of about 0.3 ms each (issue 42)."""
MAX_PATHS = 32
"""Paths one variation sets."""
MAX_PATH_CHARS = 200
"""The longest dotted path (the estimate request's longest today is under 40 characters)."""
MAX_VALUE_DEPTH = 16
"""The deepest a value may nest (lists and objects): the estimate request's deepest field is
three levels down; a value nested hundreds deep would exhaust the stack of copying it."""
FIXED_IN_BASE = ("calibration_id",)
"""Paths a variation may not set: the calibration is resolved once, for the base."""
COMM_PARTS = ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm_exposed")
"""The step-time parts that are communication (``time.breakdown_s``): the tensor-, context-,
expert- and pipeline-parallel transfers and the exposed data-parallel reduction. The pipeline
bubble, the optimizer step, host offload, FSDP2's copies and the fixed overhead are not."""
OTHER_PARTS = ("compute", "pp_bubble", "optimizer", "host_offload", "fsdp_copy", "step_overhead")
"""The step-time parts that are not communication: with ``COMM_PARTS``, every field of
``time.breakdown_s`` (a test holds them to it, so a part added later is classed here)."""


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's annotation holds (through Optional, unions and
    ``Annotated``); empty for a leaf (a number, a string, an enum, a list)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _models_in(typing.get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []


def path_problem(path: str, root: type[BaseModel] = EstimateRequest) -> str | None:
    """Why ``path`` names no field of ``root`` (None when it names one): each part but the
    last must be a field holding a model, the last any field of the model before it."""
    if not path or len(path) > MAX_PATH_CHARS:
        return f"a path is 1 to {MAX_PATH_CHARS} characters"
    if path in FIXED_IN_BASE or path.split(".")[0] in FIXED_IN_BASE:
        return f"{path} is set in the base only (it is resolved once for every variation)"
    models: list[type[BaseModel]] = [root]
    walked: list[str] = []
    for part in path.split("."):
        fields = [m.model_fields[part] for m in models if part in m.model_fields]
        where = ".".join(walked) or "the estimate request"
        if not models:
            return f"{where} is not an object, so it has no field {part!r}"
        if not fields:
            known = sorted({name for m in models for name in m.model_fields})
            return f"{where} has no field {part!r} (its fields: {', '.join(known)})"
        models = [m for f in fields for m in _models_in(f.annotation)]
        walked.append(part)
    return None


def _depth(value: Any) -> int:
    """How deep ``value`` nests (a number 0, ``[1]`` 1), counted without recursion, up to one
    past ``MAX_VALUE_DEPTH``."""
    deepest, stack = 0, [(value, 0)]
    while stack and deepest <= MAX_VALUE_DEPTH:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        children = node.values() if isinstance(node, dict) else node if isinstance(
            node, list) else ()
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _overlap(paths: list[str]) -> tuple[str, str] | None:
    """Two paths of which one sets an object holding the other (their order would decide)."""
    for shorter in paths:
        for longer in paths:
            if longer.startswith(shorter + "."):
                return shorter, longer
    return None


class VariationIn(RequestModel):
    """The base body with these fields set."""

    name: Annotated[str, TextRule(max_length=80, min_length=1)] | None = Field(
        default=None, description="A label for the variation (default: its paths and values).",
        examples=["2,048 GPUs"])
    set: dict[Annotated[str, TextRule(max_length=MAX_PATH_CHARS, min_length=1)], Any] = Field(
        min_length=1, max_length=MAX_PATHS, description=(
            f"Dotted field paths of the estimate request and their values (1 to {MAX_PATHS}): "
            "each path must name a field of the estimate request (checked recursively "
            "against its schema), intermediate objects absent from the base are created, and "
            "a value replaces the base's. A path naming an object (\"parallelism\") replaces "
            "it whole. calibration_id is the base's only."),
        examples=[{"cluster.num_gpus": 2048, "parallelism.dp": 64}])

    @field_validator("set")
    @classmethod
    def _shallow(cls, changes: dict[str, Any]) -> dict[str, Any]:
        if any(_depth(value) > MAX_VALUE_DEPTH for value in changes.values()):
            raise PydanticCustomError(
                "value_too_deep", "a value nests more than {limit} levels deep",
                {"limit": MAX_VALUE_DEPTH})
        return changes


WHAT_IF_BASE: dict[str, Any] = {
    **ESTIMATE_EXAMPLE,
    "cluster": {"accelerator": "h100-sxm5-80gb", "num_gpus": 1024, "gpus_per_node": 8},
    "parallelism": {"tp": 8, "pp": 4, "dp": 32, "cp": 1, "vp": 5, "micro_batch": 1,
                    "sequence_parallel": True, "zero_stage": 1, "recompute": "none"},
    "training": {"seq_len": 8192, "global_batch_seqs": 512, "tokens": 15e12,
                 "precision": "bf16", "framework": "megatron"},
}
"""Llama 3.1 70B on 1,024 H100: TP8 PP4 DP32, 4M-token batches, 15T tokens."""

WHAT_IF_EXAMPLE: dict[str, Any] = {
    "base": WHAT_IF_BASE,
    "variations": [
        {"name": "100 Gb/s per GPU", "set": {"cluster.scaleout_bytes_per_s_per_gpu": 1.25e10}},
        {"name": "2,048 GPUs", "set": {"cluster.num_gpus": 2048, "parallelism.dp": 64}},
        {"name": "8M-token batch", "set": {"training.global_batch_seqs": 1024}},
        {"name": "TP4 PP8", "set": {"parallelism.tp": 4, "parallelism.pp": 8}},
    ],
    "price_per_gpu_hour_usd": "2.50",
}


class WhatIfRequest(RequestModel):
    """An estimate body and the variations of it to compare."""

    model_config = RequestModel.model_config | {
        "json_schema_extra": {"examples": [WHAT_IF_EXAMPLE]}
    }

    base: EstimateRequest = Field(description=(
        "The estimate body, as POST /v1/estimates takes it. Its parallelism fields may not be "
        "\"auto\": a sweep compares fixed layouts (POST /v1/estimates or "
        "/v1/parallelism-plans picks them)."))
    variations: list[VariationIn] = Field(
        min_length=1, max_length=MAX_VARIATIONS,
        description=f"1 to {MAX_VARIATIONS} variations of the base, answered in this order.")
    price_per_gpu_hour_usd: PricePerGpuHour | None = Field(
        default=None, description="USD per GPU-hour: each answer's cost (GPU-hours × price) "
                                  "and its delta. Without it, no cost.", examples=["2.50"])

    _base_body: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_the_base_body(cls, data: Any, handler: Any) -> Self:
        """Keep the base as it came (the parsed JSON), to vary it and validate each variation
        as POST /v1/estimates validates a body; a dump of the parsed model would differ
        in which fields count as given."""
        request: Self = handler(data)
        if isinstance(data, dict) and isinstance(data.get("base"), dict):
            request._base_body = data["base"]
        else:  # built in code from models: the base as given
            request._base_body = request.base.model_dump(mode="json", exclude_unset=True)
        return request

    @model_validator(mode="after")
    def _paths_name_fields(self) -> Self:
        errors: list[InitErrorDetails] = []
        for field in sorted(self.base.parallelism.auto_dimensions()):
            errors.append(InitErrorDetails(
                type=PydanticCustomError(
                    "auto_not_allowed",
                    "a what-if compares fixed layouts: give parallelism.{field} a value "
                    "(POST /v1/estimates with \"auto\" names the one it chose)",
                    {"field": field}),
                loc=("base", "parallelism", field), input=None))
        for index, variation in enumerate(self.variations):
            for path in variation.set:
                problem = path_problem(path)
                if problem is not None:
                    errors.append(InitErrorDetails(
                        type=PydanticCustomError(
                            "unknown_path", "variation {index}: {path}: {problem}",
                            {"index": index, "path": path, "problem": problem}),
                        loc=("variations", index, "set", path), input=None))
            pair = _overlap(list(variation.set))
            if pair is not None:
                errors.append(InitErrorDetails(
                    type=PydanticCustomError(
                        "overlapping_paths",
                        "variation {index}: {outer} and {inner} overlap (set the object "
                        "whole, or its fields one by one)",
                        {"index": index, "outer": pair[0], "inner": pair[1]}),
                    loc=("variations", index, "set", pair[1]), input=None))
        if errors:
            raise ValidationError.from_exception_data("WhatIfRequest", errors)
        return self

    def base_body(self) -> dict[str, Any]:
        """The base estimate body as the client sent it."""
        return self._base_body


class SummaryOut(BaseModel):
    """One estimate's figures for comparison."""

    tokens_per_s: float = Field(description="time.tokens_per_s of the estimate.")
    step_s: float = Field(description="time.step_s.")
    train_s: float = Field(description="time.train_s: the wall-clock of the run.")
    gpu_hours: float = Field(description="time.gpu_hours.")
    mfu_fraction: float = Field(description="time.mfu_fraction.")
    comm_fraction: float = Field(description=(
        "Communication's share of the step: the sum of time.breakdown_s's "
        + ", ".join(COMM_PARTS) + " over time.step_s."))
    fits: bool = Field(description="memory.fits: the peak fits in the GPU's memory.")
    cost_usd: str | None = Field(description=(
        "GPU-hours × price_per_gpu_hour_usd, in cents (a decimal string); null without a "
        "price."), examples=["1234567.89"])
    warnings: list[str] = Field(description="The estimate's warnings.")


class DeltaOut(BaseModel):
    """A variation minus the base: absolute, and as a fraction of the base (null where the
    base's figure is 0)."""

    tokens_per_s: float
    tokens_per_s_fraction: float | None
    train_s: float
    train_s_fraction: float | None
    step_s: float
    step_s_fraction: float | None
    comm_fraction: float = Field(description="The change of the communication share, in "
                                             "share points (0.05: five points more).")
    comm_fraction_fraction: float | None = Field(description="That change over the base's "
                                                             "share.")
    cost_usd: str | None = Field(description="The cost's change in USD (decimal string).")
    cost_fraction: float | None


class VariationErrorOut(BaseModel):
    """Why a variation has no estimate: the problem POST /v1/estimates would answer for its
    body (``code`` is that problem's type slug)."""

    code: str = Field(description=(
        "validation-error (a value the estimate request refuses: errors names each field), "
        "auto-not-allowed (a parallelism field set to \"auto\"), invalid-spec (a modelling "
        "rule: field names it), infeasible-plan, no-feasible-plan."),
        examples=["validation-error"])
    title: str
    detail: str
    field: str | None = Field(default=None, description="The input a domain rule names.")
    errors: list[FieldError] = Field(default_factory=list)


class VariationOut(BaseModel):
    index: int = Field(description="The variation's position in the request (0-based).")
    name: str = Field(description="Its name, or its paths and values.")
    paths: list[str] = Field(description="The paths it sets.")
    summary: SummaryOut | None = Field(description="Null when the variation is in error.")
    delta: DeltaOut | None
    error: VariationErrorOut | None = Field(description="Null when the variation answered.")


class RankOut(BaseModel):
    index: int
    name: str
    train_s_delta: float = Field(description="delta.train_s of the variation.")


class WhatIfResponse(BaseModel):
    base: SummaryOut
    variations: list[VariationOut] = Field(description="In the request's order.")
    ranking: list[RankOut] = Field(description=(
        "The variations that answered, by |delta.train_s|, largest first (ties in request "
        "order): which change matters most, as the portal's tornado chart draws it."))
    price_per_gpu_hour_usd: str | None
    calibration_version: str
