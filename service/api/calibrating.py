"""User calibrations between HTTP and the core (issue 37): turn measured runs into
``core.user_calibration`` inputs, and a stored calibration into the ``Calibration`` that
estimates, plans and quotes use.

A run is one estimate under the project's fit (about 0.2 ms of CPU; 10,000 runs about 2 s,
measured in tests/api/test_calibrations.py's bounded-time test); the fit itself is a few
milliseconds. The runs are estimated within the request's search deadline
(``CQ_SEARCH_DEADLINE_S``, the bound every search of a request keeps): past it the request is
refused with 503 ``search-deadline`` and nothing is stored."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from anyio import from_thread
from fastapi import Request
from sqlalchemy.orm import Session

from service.api.auth import Principal, caller, reader_of
from service.api.deps import AcceleratorCache, held
from service.api.work import SearchDeadlineError
from service.api.workers import run_cpu_bound
from service.catalog import calibrations as store
from service.catalog.errors import NotFoundError
from service.catalog.quotes import Reader
from service.core.calibration import DEFAULT_CALIBRATION, Band, Calibration
from service.core.errors import CoreError, InvalidSpecError
from service.core.estimate import estimate
from service.core.specs import ClusterSpec, EnergySpec, ModelSpec, ParallelismPlan, TrainingSpec
from service.core.units import bytes_to_gib
from service.core.user_calibration import (
    MeasuredRun,
    OutlierRunsError,
    UserFit,
    apply,
    fit,
    step_parts,
)

DEADLINE_CHECK_EVERY = 64
"""Runs estimated between two looks at the clock."""
NOT_VISIBLE = ("no calibration with this id that this API key may read (calibrations are read "
               "by their principal, its team and calibrations:admin keys; send the key with "
               "Authorization: Bearer)")


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredCalibration:
    """What a request needs of a stored calibration (immutable, so it may be held)."""

    id: str
    name: str
    revision: int
    principal: str
    team: str | None
    runs_used: int
    base_calibration_version: str
    fit: dict[str, Any]

    def calibration(self, base: Calibration = DEFAULT_CALIBRATION) -> Calibration:
        bands = dict(base.bands)
        for regime, band in self.fit["bands"].items():
            bands[regime] = Band(regime=regime, low_fraction=band["low_fraction"],
                                 high_fraction=band["high_fraction"], rows=band["runs"],
                                 coverage_fraction=band["coverage_fraction"])
        return apply(base, self.fit["factors"], bands)

    def note(self) -> str:
        """The assumption every answer that used it states."""
        factors = ", ".join(f"{k} x{v:.3g}" for k, v in self.fit["factors"].items())
        regimes = ", ".join(sorted(self.fit["bands"]))
        note = (f"calibration_id {self.id} (revision {self.revision}, '{self.name}'): the "
                f"user's factors on the project's fit ({factors}) from {self.runs_used} "
                f"measured run(s); the band of the '{regimes}' regime(s) is blended with "
                "those runs' leave-one-out errors, every other regime keeps the project's")
        if self.base_calibration_version != DEFAULT_CALIBRATION.version:
            note += (f"; fitted against calibration {self.base_calibration_version}, the "
                     f"model now runs {DEFAULT_CALIBRATION.version}")
        return note

    def ref(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "revision": self.revision}


def stored_of(row: Any) -> StoredCalibration:
    return StoredCalibration(
        id=row.id, name=row.name, revision=row.revision, principal=row.principal,
        team=row.team, runs_used=row.runs_used,
        base_calibration_version=row.base_calibration_version, fit=dict(row.fit))


def fit_json(user: UserFit) -> dict[str, Any]:
    """What is stored to rebuild the calibration: the factors and the runs' regimes' bands."""
    return {
        "factors": {f.name: f.value for f in user.factors},
        "bands": {regime: {"low_fraction": user.bands[regime].low_fraction,
                           "high_fraction": user.bands[regime].high_fraction,
                           "runs": user.bands[regime].rows,
                           "coverage_fraction": user.bands[regime].coverage_fraction}
                  for regime in user.regimes},
    }


def load(session: Session, calibration_id: str, reader: Reader | None) -> StoredCalibration:
    """The stored calibration ``reader`` may read (None: any, for a stored quote's own
    reference); unknown or not visible: 422 naming ``calibration_id``."""
    try:
        return stored_of(store.get_calibration(session, calibration_id, reader))
    except NotFoundError:
        raise InvalidSpecError(
            NOT_VISIBLE, field="calibration_id") from None


async def resolve(request: Request, calibration_id: str | None,
                  ) -> StoredCalibration | None:
    """The calibration a request names, read in the pool and held in memory by id (a
    calibration never changes), checked against the caller's key; None when none is named."""
    if calibration_id is None:
        return None
    # The ``caller`` dependency, or what overrides it (``cq --local``), asked here and not
    # declared by the routes: only a request that names a calibration has its key read.
    override = request.app.dependency_overrides.get(caller)
    principal = (cast(Principal | None, override()) if override is not None
                 else await caller(request))

    def read(session: Session) -> StoredCalibration | None:
        try:
            return stored_of(store.get_calibration(session, calibration_id, None))
        except NotFoundError:
            return None

    found = await held(request, ("user-calibration", calibration_id), read,
                       keep=lambda value: value is not None)
    if (found is None or principal is None
            or not reader_of(principal, "calibrations:admin").may_read(found)):
        raise InvalidSpecError(NOT_VISIBLE, field="calibration_id")
    return found


def resolve_in_thread(request: Request, calibration_id: str | None,
                      ) -> StoredCalibration | None:
    """``resolve`` for a route that runs in the thread pool (a plan search): the caller's key
    is read on the event loop, and only when a calibration is named (a plan request's
    Authorization header is otherwise not looked at, as before)."""
    if calibration_id is None:
        return None
    stored: StoredCalibration | None = from_thread.run(resolve, request, calibration_id)
    return stored


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSpec:
    """One run as core inputs (it pickles, for a worker process)."""

    model: ModelSpec
    cluster: ClusterSpec
    plan: ParallelismPlan
    training: TrainingSpec
    energy: EnergySpec
    measured_step_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal:
    """A run refused in the worker: the problem's field and detail (exceptions with
    keyword-only fields do not pickle back)."""

    field: str
    message: str
    outliers: bool = False


def run_specs(runs: Sequence[Any], cache: AcceleratorCache) -> list[RunSpec]:
    """Each run's core inputs. A run with an ``"auto"`` field, a calibration of its own or an
    invalid field is refused (422 naming ``runs.N.estimate...``)."""
    specs: list[RunSpec] = []
    for index, run in enumerate(runs):
        prefix = f"runs.{index}.estimate"
        body = run.estimate
        autos = body.parallelism.auto_dimensions()
        if autos:
            raise InvalidSpecError(
                "a measured run names its layout: \"auto\" is not accepted in a calibration "
                f"run ({', '.join(sorted(autos))})",
                field=f"{prefix}.parallelism.{sorted(autos)[0]}")
        if body.calibration_id is not None:
            raise InvalidSpecError("a run is fitted against the project's model: leave "
                                   "calibration_id out of it", field=f"{prefix}.calibration_id")
        try:
            accelerator = cache.require(body.cluster.accelerator, f"{prefix}.cluster.accelerator")
            cluster = body.cluster.to_core(accelerator)
            specs.append(RunSpec(
                model=body.model.to_core(), cluster=cluster,
                plan=body.parallelism.to_core(cluster.num_gpus), training=body.training.to_core(),
                energy=body.energy.to_core(), measured_step_s=run.measured.step_time_s))
        except InvalidSpecError as exc:
            raise InvalidSpecError(str(exc), field=_under(prefix, exc.field)) from None
    return specs


def _under(prefix: str, field: str | None) -> str:
    if field and field.startswith("runs."):
        return field
    return f"{prefix}.{field}" if field else prefix


def fit_runs(specs: Sequence[RunSpec], ends_at: float) -> UserFit | Refusal:
    """Estimate every run under the project's fit and fit the user's factors (in a worker
    process: a top-level function, so it pickles). Past ``ends_at`` (a ``time.monotonic()``
    instant) it stops with ``SearchDeadlineError``. A run that does not fit in memory, or that
    the fit refuses, comes back as a ``Refusal``."""
    measured: list[MeasuredRun] = []
    for index, spec in enumerate(specs):
        if index % DEADLINE_CHECK_EVERY == 0 and time.monotonic() > ends_at:
            return Refusal(field="runs", message="deadline")
        prefix = f"runs.{index}.estimate"
        try:
            result = estimate(spec.model, spec.cluster, spec.plan, spec.training,
                              energy=spec.energy)
        except InvalidSpecError as exc:
            return Refusal(field=_under(prefix, exc.field), message=str(exc))
        except CoreError as exc:
            return Refusal(field=prefix, message=str(exc))
        memory = result.memory
        if not memory.fits:
            return Refusal(field=f"{prefix}.parallelism", message=(
                f"the run's layout does not fit in memory by the model: it needs "
                f"{bytes_to_gib(memory.peak_bytes):.1f} GiB per GPU of "
                f"{bytes_to_gib(memory.capacity_bytes):.1f}; a time measured on it cannot "
                "calibrate the estimate (check the layout fields, or the recompute mode)"))
        regime = DEFAULT_CALIBRATION.regime_of(
            framework=spec.training.framework, moe=spec.model.is_moe,
            accelerator_id=spec.cluster.accelerator.id)
        measured.append(MeasuredRun(
            parts=step_parts(result.throughput.step, spec.cluster.num_gpus,
                             DEFAULT_CALIBRATION),
            measured_step_s=spec.measured_step_s, regime=regime))
    try:
        return fit(measured)
    except OutlierRunsError as exc:
        return Refusal(field=exc.field or "runs", message=str(exc), outliers=True)
    except InvalidSpecError as exc:
        return Refusal(field=exc.field or "runs", message=str(exc))


def fit_or_refuse(specs: Sequence[RunSpec], workers: int, deadline_s: float) -> UserFit:
    """``fit_runs`` in a search worker within ``deadline_s`` (the wait for a worker
    included); a refusal becomes its 422, the deadline its 503."""
    ends_at = time.monotonic() + deadline_s
    try:
        outcome = run_cpu_bound(workers, fit_runs, specs, ends_at, timeout_s=deadline_s,
                                start_by=ends_at)
    except TimeoutError:
        raise SearchDeadlineError(deadline_s) from None
    if isinstance(outcome, Refusal):
        if outcome.field == "runs" and outcome.message == "deadline":
            raise SearchDeadlineError(deadline_s)
        raise InvalidSpecError(outcome.message, field=outcome.field)
    return outcome
