"""The quote vertical between HTTP and the core: size a workload (estimate or plan search),
time it on each offer's fabric, price and judge it in ``core.quote``, and write the answer.

Routes call ``compute_quote``; nothing here knows about storage."""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib
import json
import pkgutil
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from sqlalchemy.orm import Session

import service.core
from service import __version__
from service.api.auto import resolve_plan
from service.api.calibrating import StoredCalibration
from service.api.deps import AcceleratorCache
from service.api.observability import (
    pricing_attributes,
    search_attributes,
    timed_pricing,
    timed_search,
)
from service.api.page_cache import PageCache
from service.api.schemas.estimate import (
    ModelIn,
    estimate_defaults,
    plan_dict,
    training_defaults,
)
from service.api.schemas.fx import FxConversionOut
from service.api.schemas.plans import CandidateClusterIn, ConstraintsIn, PlanTrainingIn
from service.api.schemas.quotes import (
    BudgetPlanRequest,
    QuoteRequest,
    ServingWorkload,
    cents_text,
    lines_text,
    policy_json,
    rule_json,
)
from service.api.schemas.quotes import line_json as line_json  # api.budget_plans imports it
from service.api.work import WorkBudget
from service.api.workers import run_cpu_bound
from service.catalog import discounts as discount_books
from service.catalog import fx
from service.catalog.errors import NotFoundError
from service.catalog.fx import Conversion
from service.catalog.quoting import load_offers, onprem_inputs
from service.core import quote as core_quote
from service.core import serving
from service.core.calibration import DEFAULT_CALIBRATION, Calibration
from service.core.discounts import DiscountBook, apply_book
from service.core.errors import CoreError, InvalidSpecError, NoFeasiblePlanError, NoLayoutError
from service.core.estimate import Estimate, average_power_w_per_gpu, estimate
from service.core.fabric import fabric_details
from service.core.failures import checkpoint_bytes
from service.core.plausibility import (
    WarningDetail,
    costly_warnings,
    long_run_warning,
)
from service.core.policy import Accounting, Policy
from service.core.quote import (
    Fabric,
    JobTiming,
    OnPremInputs,
    Options,
    PriceOffer,
    QuoteLine,
    QuoteResult,
    SizedJob,
)
from service.core.search import (
    DEFAULT_DEADLINE_S,
    SearchRequest,
    SearchTooLargeError,
    frozen_clock,
    no_layout_problem,
    search,
)
from service.core.specs import (
    AcceleratorSpec,
    ClusterSpec,
    EnergySpec,
    FabricSpec,
    ModelSpec,
    ParallelismPlan,
    TrainingSpec,
)
from service.core.units import gbits_per_s_to_bytes_per_s


def _stable_repr(value: Any) -> str | None:
    """A constant's text that is the same in every process: sets sorted; objects without a
    value repr (``<... at 0x...>``, such as the scalar ops namespace) left out."""
    if isinstance(value, set | frozenset):
        return repr(sorted(value, key=repr))
    text = repr(value)
    return None if " at 0x" in text else text


def _constants(*modules: Any) -> list[tuple[str, str]]:
    found = ((f"{m.__name__}.{k}", _stable_repr(v)) for m in modules
             for k, v in vars(m).items() if k.isupper())
    return sorted((name, text) for name, text in found if text is not None)


def core_modules() -> tuple[Any, ...]:
    """Every module of ``service.core``, by name: the modules whose constants the estimator
    version hashes (issue 38: it used to name six, and missed the serving model's)."""
    names = sorted(info.name for info in pkgutil.iter_modules(service.core.__path__))
    return tuple(importlib.import_module(f"service.core.{name}") for name in names)


def estimator_version(modules: tuple[Any, ...]) -> str:
    """Package version, calibration version and a hash of the calibration and of every
    upper-case constant of ``modules``."""
    digest = hashlib.sha256((repr(DEFAULT_CALIBRATION) + repr(_constants(*modules))).encode())
    return f"{__version__}+cal.{DEFAULT_CALIBRATION.version}+{digest.hexdigest()[:12]}"


ESTIMATOR_VERSION = estimator_version(core_modules())
"""The fingerprint of every ``service.core`` module's constants (training and serving models,
pricing, quote and policy rules): it moves whenever a figure could."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What re-times a job on another fabric: the model, the training and the plan."""

    model: ModelSpec
    training: TrainingSpec
    plan: ParallelismPlan
    accelerator: AcceleratorSpec
    energy: EnergySpec
    calibration: Calibration = DEFAULT_CALIBRATION
    """The user calibration the quote names (issue 37), else the project's fit."""
    fabric: FabricSpec | None = None
    """The ``cluster.fabric`` the request states (issue 42): kept when the job is re-timed on
    an offer's network, which sets the bandwidth and NVLink domain, not the protocol."""


def _timing(result: Estimate, basis: str) -> JobTiming:
    t = result.throughput
    return JobTiming(wall_s=t.train_s,
                     wall_s_p10=t.train_s * t.tokens_per_s / t.tokens_per_s_high,
                     wall_s_p90=t.train_s * t.tokens_per_s / t.tokens_per_s_low, basis=basis)


def _fast_domain(plan: ParallelismPlan) -> int:
    return plan.tp * plan.cp


def _job(accelerator: AcceleratorSpec, cluster: ClusterSpec, model: ModelSpec,
         plan: ParallelismPlan, training: TrainingSpec, energy: EnergySpec, result: Estimate,
         batch: int, defaulted: Sequence[WarningDetail] = (),
         calibration: Calibration = DEFAULT_CALIBRATION) -> tuple[SizedJob, Plan]:
    job = SizedJob(
        warning_details=(*result.warning_details, *defaulted),
        accelerator=accelerator.id, num_gpus=cluster.num_gpus,
        timing=_timing(result, f"estimate on the reference node ({cluster.gpus_per_node} GPUs "
                               "per node, the accelerator's datasheet network)"),
        checkpoint_bytes=checkpoint_bytes(model),
        power_w_per_gpu=average_power_w_per_gpu(accelerator.tdp_w, energy),
        fast_domain=_fast_domain(plan), plan=plan_dict(plan), global_batch_seqs=batch)
    return job, Plan(model=model, training=training, plan=plan, accelerator=accelerator,
                     energy=energy, calibration=calibration, fabric=cluster.fabric)


def optimised_jobs(
    cache: AcceleratorCache, model_in: ModelIn, training_in: PlanTrainingIn,
    clusters_in: list[CandidateClusterIn], constraints: ConstraintsIn, energy: EnergySpec,
    prefix: str, workers: int, budget: WorkBudget,
    calibration: Calibration = DEFAULT_CALIBRATION,
) -> list[tuple[SizedJob, Plan | None]]:
    """The fastest fitting plan for every candidate accelerator and GPU count, all searches
    together within ``budget``: its candidates, its deadline, and while the client is there.
    A search cut off by the deadline refuses the request (``SearchDeadlineError``) instead of
    answering from part of the space, so a quote always recomputes the same."""
    model = model_in.to_core()
    batches = training_in.batches()
    space = constraints.to_space()
    jobs: list[tuple[SizedJob, Plan | None]] = []
    no_layout: tuple[NoLayoutError, SearchRequest, str] | None = None
    # The first search that found no layout of its GPU count, kept for the refusal.
    too_big = False
    for index, candidate in enumerate(clusters_in):
        accelerator = cache.require(candidate.accelerator,
                                    f"{prefix}clusters.{index}.accelerator")
        for cluster in candidate.to_core(accelerator):
            budget.check(f"{prefix}clusters")
            left = budget.seconds_left()
            request = SearchRequest(
                model=model, clusters=(cluster,), training=training_in.to_core(batches[0]),
                global_batches=tuple(batches), space=space, top_k=1, energy=energy,
                calibration=calibration, max_candidates=budget.remaining,
                deadline_s=DEFAULT_DEADLINE_S if left is None else max(left, 0.0))
            try:
                with timed_search("sizing") as current:
                    if current is not None:
                        current.set_attributes({"computequote.model": model.name,
                                                "computequote.accelerator": accelerator.id,
                                                "computequote.num_gpus": cluster.num_gpus})
                    result = run_cpu_bound(workers, search, request,
                                           frozen_clock if left is None else budget.clock,
                                           timeout_s=left, stop=budget.cancelled)
                    if current is not None:
                        current.set_attributes(search_attributes(result))
            except NoFeasiblePlanError as exc:
                budget.charge(exc.candidates_total)
                if not isinstance(exc, NoLayoutError):
                    too_big = True
                elif no_layout is None:
                    count = "num_gpus" if candidate.num_gpus is not None else "num_gpus_range"
                    no_layout = (exc, request, f"{prefix}clusters.{index}.{count}")
                continue
            except SearchTooLargeError:
                raise budget.exhausted(f"{prefix}clusters") from None
            except TimeoutError:
                raise budget.late() from None
            budget.charge(result.stats.candidates_total)
            best = result.plans[0]
            training = training_in.to_core(best.global_batch_seqs)
            jobs.append(_job(accelerator, cluster, model, best.plan, training, energy,
                             best.estimate, best.global_batch_seqs,
                             training_defaults(training_in), calibration))
    if not jobs and no_layout is not None and not too_big:
        # Not one candidate was evaluated: name the GPU count and the nearest with a layout.
        raise no_layout_problem(*no_layout)
    if not jobs:
        raise NoFeasiblePlanError("no candidate accelerator and GPU count can run this model "
                                  "in memory")
    return jobs


def size_workload(request: QuoteRequest, cache: AcceleratorCache, budget: WorkBudget,
                  workers: int = 0, calibration: Calibration | None = None,
                  ) -> list[tuple[SizedJob, Plan | None]]:
    """The quote's jobs; ``calibration``: the user calibration its ``calibration_id`` names
    (training workloads only: 422 on a serving or GPU-hours one)."""
    energy = request.energy.to_core()
    workload = request.workload
    if calibration is not None and (workload.gpu_hours is not None
                                    or workload.serving is not None):
        raise InvalidSpecError("a calibration applies to training workloads (estimate or "
                               "optimise)", field="calibration_id")
    if workload.estimate is not None and workload.estimate.calibration_id is not None:
        raise InvalidSpecError("give calibration_id at the top level of the quote",
                               field="workload.estimate.calibration_id")
    calibration = calibration or DEFAULT_CALIBRATION
    if workload.gpu_hours is not None:
        spec = workload.gpu_hours
        accelerator = cache.require(spec.accelerator, "workload.gpu_hours.accelerator")
        wall_s = spec.gpu_hours / spec.num_gpus * 3600.0
        return [(SizedJob(
            accelerator=accelerator.id, num_gpus=spec.num_gpus,
            timing=JobTiming(wall_s=wall_s, wall_s_p10=wall_s, wall_s_p90=wall_s,
                             basis="GPU-hours given by the caller (no band)"),
            checkpoint_bytes=spec.checkpoint_bytes,
            power_w_per_gpu=average_power_w_per_gpu(accelerator.tdp_w, energy)), None)]
    if workload.estimate is not None:
        est = workload.estimate
        model = est.model.to_core()
        accelerator = cache.require(est.cluster.accelerator,
                                    "workload.estimate.cluster.accelerator")
        cluster = est.cluster.to_core(accelerator)
        training = est.training.to_core()
        plan, _ = resolve_plan(model, cluster, est.parallelism, training, energy,
                               calibration=calibration)
        result = estimate(model, cluster, plan, training, energy=energy,
                          calibration=calibration)
        return [_job(accelerator, cluster, model, plan, training, energy, result,
                     est.training.global_batch_seqs, estimate_defaults(est, plan),
                     calibration)]
    if workload.serving is not None:
        return serving_jobs(workload.serving, cache, energy)
    assert workload.optimise is not None  # noqa: S101 - the schema requires exactly one
    opt = workload.optimise
    return optimised_jobs(cache, opt.model, opt.training, opt.clusters, opt.constraints,
                          energy, "workload.optimise.", workers, budget, calibration)


def serving_jobs(spec: ServingWorkload, cache: AcceleratorCache, energy: EnergySpec,
                 ) -> list[tuple[SizedJob, Plan | None]]:
    """A serving fleet as jobs (issue 19): the estimate's deployment sized for its load, or
    per accelerator of a plan the deployment with the fewest GPUs that meets the SLOs; each
    held for ``duration_s``. A deployment that does not fit, saturates or misses an SLO is
    refused rather than quoted: the quote would promise a fleet that does not serve."""
    fleets: list[tuple[serving.Deployment, serving.ServingEstimate]] = []
    if spec.estimate is not None:
        given = spec.estimate
        where = "workload.serving.estimate"
        accelerator = cache.require(given.deployment.accelerator,
                                    f"{where}.deployment.accelerator")
        try:
            deployment = given.deployment.to_core(accelerator)
            result = serving.serve(given.model.to_core(), deployment, given.traffic.to_core(),
                                   replicas=spec.replicas)
        except InvalidSpecError as exc:  # the core names fields of the estimate's body
            raise InvalidSpecError(str(exc), field=(
                f"{where}.{exc.field}" if exc.field else where)) from None
        if not result.memory.fits:
            raise InvalidSpecError(f"the deployment does not fit: {result.warnings[0]}",
                                   field=f"{where}.deployment")
        if result.saturated or result.meets_slo is False:
            raise NoFeasiblePlanError(
                f"{result.replicas} replica(s) of this deployment do not serve the load "
                f"{'within the SLOs' if result.meets_slo is False else 'below saturation'} "
                f"(p99 TTFT {result.ttft_s.p99:.3g} s, p99 TPOT {result.tpot_s.p99:.3g} s): "
                "POST /v1/serving-plans finds one that does")
        fleets.append((deployment, result))
    else:
        search = spec.plan
        assert search is not None  # noqa: S101 - the schema requires one of the two
        model = search.model.to_core()
        traffic = search.traffic.to_core()
        for index, name in enumerate(search.accelerators):
            accelerator = cache.require(name, f"workload.serving.plan.accelerators.{index}")
            found = serving.plan_serving(
                model, [accelerator], traffic, engine=search.engine,
                weight_precisions=search.weight_precisions,
                kv_cache_precisions=search.kv_cache_precisions,
                max_batches=search.max_batches or [None], max_tp=search.max_tp, top_k=1)
            if found.plans:
                fleets.append((found.plans[0].deployment, found.plans[0].estimate))
        if not fleets:
            raise NoFeasiblePlanError("no deployment on the candidate accelerators fits and "
                                      "meets the SLOs at the load")
    jobs: list[tuple[SizedJob, Plan | None]] = []
    for deployment, result in fleets:
        accelerator = deployment.accelerator
        duration_s = spec.duration_s
        slow = result.slow_end
        basis = "a serving fleet held for workload.serving.duration_s, sized for its peak load"
        if slow is not None:
            basis += (f"; its cost band's p90 on the {slow.replicas} replica(s) the load needs "
                      f"at the serving band's slow end (every time x{slow.factor:.3g})")
        jobs.append((SizedJob(
            accelerator=accelerator.id,
            num_gpus=result.replicas * deployment.gpus_per_replica,
            timing=JobTiming(wall_s=duration_s, wall_s_p10=duration_s, wall_s_p90=duration_s,
                             basis=basis),
            checkpoint_bytes=0.0,
            power_w_per_gpu=average_power_w_per_gpu(accelerator.tdp_w, energy),
            fast_domain=deployment.gpus_per_replica,
            serving={
                "accelerator": accelerator.id, "replicas": result.replicas,
                "gpus_per_replica": deployment.gpus_per_replica, "tp": deployment.tp,
                "pp": deployment.pp, "weight_precision": deployment.weight_precision.value,
                "kv_cache_precision": deployment.kv_cache_precision.value,
                "engine": deployment.engine.value, "max_batch": deployment.max_batch,
                "requests_per_s": (result.requests_per_s * result.replicas
                                   if result.requests_per_s else None),
                "capacity_requests_per_s": result.capacity_requests_per_s,
                "ttft_p99_s": result.ttft_s.p99, "tpot_p99_s": result.tpot_s.p99,
                "meets_slo": result.meets_slo, "duration_s": duration_s,
                "band_slow_end_factor": None if slow is None else slow.factor,
                "replicas_at_band_slow_end": None if slow is None else slow.replicas,
                "meets_slo_at_band_slow_end": None if slow is None else slow.meets_slo},
            warning_details=result.warning_details,
            slow_end_num_gpus=(None if slow is None
                               else slow.replicas * deployment.gpus_per_replica)), None))
    return jobs


def fabric_timing(plan: Plan, num_gpus: int, fabric: Fabric) -> JobTiming | None:
    """The job's estimate on an offer's fabric: its NVLink domain is the node, its inter-node
    network is shared by the instance's GPUs, and its protocol (the offer's ``interconnect``,
    issue 42) is the network's when the request states no ``cluster.fabric``. None when the
    layout cannot be placed there."""
    acc = plan.accelerator
    stated = plan.fabric
    if stated is None and fabric.protocol is not None:
        stated = FabricSpec(protocol=fabric.protocol)
    domain = fabric.nvlink_domain or max(1, int(fabric.gpus_per_instance))
    if fabric.inter_node_gbps:
        per_gpu = gbits_per_s_to_bytes_per_s(fabric.inter_node_gbps) / max(
            1.0, fabric.gpus_per_instance)
        acc = replace(acc, scaleout_bytes_per_s=per_gpu)
    acc = replace(acc, scaleup_domain_size=domain)
    try:
        cluster = ClusterSpec(accelerator=acc, num_gpus=num_gpus,
                              gpus_per_node=min(domain, num_gpus), fabric=stated)
        result = estimate(plan.model, cluster, plan.plan, plan.training, energy=plan.energy,
                          calibration=plan.calibration)
    except CoreError:
        return None
    network = (f"{fabric.inter_node_gbps:g} Gbit/s per instance" if fabric.inter_node_gbps
               else "the datasheet network")
    if stated is not None:
        network += (f", {stated.protocol.value}" + (" (the request's cluster.fabric)"
                                                    if plan.fabric is not None
                                                    else " (the offer's interconnect)"))
    timed = _timing(result, f"estimate on the offer's fabric ({domain} GPUs per NVLink domain, "
                            f"{network})")
    if plan.fabric is None and stated is not None:
        # The offer's protocol times the line, so the line carries the coded warning an
        # estimate stating that protocol carries (issue 42); a stated fabric's is the job's.
        timed = replace(timed, warning_details=fabric_details(cluster))
    return timed


@dataclass(frozen=True, slots=True, kw_only=True)
class Computed:
    result: QuoteResult
    options: Options
    request_fraction: Decimal
    conversion: Conversion | None = None
    """How the budget was converted; lines then show their amounts in its currency too."""
    num_offers: int = 0
    """Offers of the catalogue version that matched the request's filters (spans)."""


def budget_conversion(session: Session, request: QuoteRequest | BudgetPlanRequest,
                      version_id: str, now: dt.datetime, fx_version: str | None = None,
                      ) -> Conversion | None:
    """The budget in USD, the one pricing currency, at the ECB rates of ``request.fx_date``
    (default the quote's date, UTC) from FX table ``fx_version`` (default the request's, else
    the newest); None for a USD budget or none. Every line is priced in USD and shown in the
    budget's currency with this one rate, on-prem lines included (issue 39: a catalogue with
    offers in the budget's currency used to price only those, and label the on-prem line's
    USD amounts in it). A currency the table lacks is invalid input naming budget.currency."""
    budget = request.budget
    if budget is None or budget.currency == PRICING_CURRENCY:
        return None
    wanted = fx_version or request.fx_version
    try:
        table = fx.get_fx_version(session, wanted)
    except NotFoundError:
        raise InvalidSpecError(f"fx_version {wanted} is not a version of the FX table "
                               "(GET /v1/fx-rates)", field="fx_version") from None
    day = request.fx_date or now.date()
    try:
        fixing, rates = fx.rates_on(session, {budget.currency, PRICING_CURRENCY}, day, table)
    except NotFoundError as exc:
        raise InvalidSpecError(
            f"budget.currency {budget.currency}: the catalogue prices in "
            f"{PRICING_CURRENCY} and {exc} (import rates: POST /v1/fx-rates/imports)",
            field="budget.currency") from None
    return fx.convert(Decimal(budget.amount), budget.currency, PRICING_CURRENCY, rates,
                      fixing, table.id)


def policy_in(session: Session, policy: Policy, conversion: Conversion | None,
              ) -> tuple[Policy, dict[str, str]]:
    """``policy`` with its money limits in the pricing currency, converted with the budget's
    own ECB fixing and table version (so verify reproduces it from the quote's ``fx``), and
    rounded down to the cent, so a limit is never loosened by rounding. Without a budget
    conversion, or when the policy's currency has no rate on that fixing, the policy is
    unchanged (a limit in another currency then fails as a currency mismatch)."""
    if (conversion is None or policy.currency == conversion.into
            or (policy.max_commitment is None and policy.max_job_cost is None)):
        return policy, {}
    table = fx.get_fx_version(session, conversion.version)
    try:
        fixing, rates = fx.rates_on(session, {policy.currency, conversion.into},
                                    conversion.rate_date, table)
    except NotFoundError:
        return policy, {}
    if fixing != conversion.rate_date:
        return policy, {}
    shown: dict[str, str] = {}

    def limit_in(name: str, limit: Decimal | None) -> Decimal | None:
        if limit is None:
            return None
        c = fx.convert(limit, policy.currency, conversion.into, rates, fixing, table.id)
        shown[name] = f"{c.describe()} = {c.converted:,.2f} {c.into}"
        return c.converted

    return replace(policy, currency=conversion.into,
                   max_commitment=limit_in("max_commitment", policy.max_commitment),
                   max_job_cost=limit_in("max_job_cost", policy.max_job_cost)), shown


def discount_book(session: Session, name: str | None,
                  revision: int | None = None) -> DiscountBook | None:
    """The book a request names (its newest revision, or ``revision`` for verify); an
    unknown name is invalid input naming discount_book."""
    if name is None:
        return None
    try:
        row = (discount_books.get_revision(session, name, revision) if revision
               else discount_books.latest(session, name))
    except NotFoundError:
        raise InvalidSpecError(f"discount_book {name!r} is not a discount book: create it "
                               "with POST /v1/discount-books", field="discount_book") from None
    return discount_books.to_core(row)


def fx_json(conversion: Conversion | None, requested: dt.date,
            policy_limits: dict[str, str]) -> dict[str, Any] | None:
    """A quote's or budget plan's ``fx`` block (FxConversionOut), or None without one."""
    if conversion is None:
        return None
    out = FxConversionOut.from_conversion(conversion, requested, policy_limits)
    return out.model_dump(mode="json")


PRICING_CURRENCY = "USD"
"""The currency a budget is converted into when the catalogue has no offers in its own."""


def options_for(request: QuoteRequest | BudgetPlanRequest,
                conversion: Conversion | None = None) -> Options:
    budget = request.budget
    amortised = request.accounting == Accounting.AMORTISED.value
    fraction = request.reservation_utilisation_fraction
    return Options(
        currency=(conversion.into if conversion is not None
                  else budget.currency if budget is not None else "USD"),
        budget=(conversion.converted if conversion is not None
                else Decimal(budget.amount) if budget is not None else None),
        budget_basis=conversion.describe() if conversion is not None else None,
        fx_fixing_date=conversion.rate_date.isoformat() if conversion is not None else None,
        fx_fixing_day=conversion.rate_date.toordinal() if conversion is not None else None,
        deadline_s=request.deadline_s,
        accounting=Accounting(request.accounting),
        utilisation_fraction=Decimal(fraction) if amortised and fraction else Decimal(1),
        failure_rate_per_gpu_hour=request.reliability.failure_rate_per_gpu_hour,
        restart_s=request.reliability.restart_s,
        checkpoint_bytes_per_s=request.reliability.checkpoint_bytes_per_s,
        pue=request.energy.pue, grid_gco2e_per_kwh=request.energy.grid_gco2e_per_kwh,
        rank_by=core_quote.RankBy(getattr(request, "rank_by", "total")),
    )


OfferCache = PageCache[list[PriceOffer]]


def price(
    session: Session, request: QuoteRequest | BudgetPlanRequest,
    jobs: Sequence[tuple[SizedJob, Plan | None]], version_id: str, policy: Policy,
    now: dt.datetime, *, gated: bool, offer_cache: OfferCache | None = None,
    conversion: Conversion | None = None, book: DiscountBook | None = None,
) -> Computed:
    """Load the offers, time each job on each fabric, price and judge. The offers of a
    version are a pure function of the version id and the filters (versions are immutable),
    so ``offer_cache`` may hold them (issue 16: loading was a quarter of a quote's CPU)."""
    with timed_pricing() as current:
        computed = _price(session, request, jobs, version_id, policy, now, gated=gated,
                          offer_cache=offer_cache, conversion=conversion, book=book)
        if current is not None:
            current.set_attributes(pricing_attributes(computed.result, version_id,
                                                      computed.num_offers))
    return computed


def _price(
    session: Session, request: QuoteRequest | BudgetPlanRequest,
    jobs: Sequence[tuple[SizedJob, Plan | None]], version_id: str, policy: Policy,
    now: dt.datetime, *, gated: bool, offer_cache: OfferCache | None,
    conversion: Conversion | None, book: DiscountBook | None,
) -> Computed:
    options = options_for(request, conversion)
    accelerators = frozenset(j.accelerator for j, _ in jobs)

    def loaded(currency: str) -> list[PriceOffer]:
        def load() -> list[PriceOffer]:
            return load_offers(session, version_id, accelerators, terms=request.terms,
                               providers=request.providers, regions=request.regions,
                               currency=currency)

        key = (version_id, accelerators, tuple(sorted(request.terms)),
               tuple(sorted(request.providers)), tuple(sorted(request.regions)), currency)
        return load() if offer_cache is None else offer_cache.get_or_build(key, load)

    offers = loaded(options.currency)
    # Offers in another currency are listed in rejected_offers with a code (issue 39), not
    # dropped; their filters are the same as the priced offers'.
    unconverted = [o for currency in fx.offer_currencies(session, version_id, accelerators)
                   if currency != options.currency for o in loaded(currency)]
    if book is not None:
        offers = apply_book(book, offers, now.date().toordinal())
    timings: dict[tuple[int, Fabric], JobTiming] = {}
    for index, (job, plan) in enumerate(jobs):
        if plan is None:
            continue
        for fabric in {o.fabric for o in offers if o.accelerator == job.accelerator}:
            if core_quote.node_fit(job, fabric) is None or not policy.require_node_fit:
                timed = fabric_timing(plan, job.num_gpus, fabric)
                if timed is not None:
                    timings[(index, fabric)] = timed
    onprem: dict[str, OnPremInputs] = {}
    if "onprem" in request.terms and (not request.providers or "onprem" in request.providers):
        raw = {k: v for k, v in request.onprem.model_dump(mode="json").items() if v is not None}
        for job, _ in jobs:
            onprem.setdefault(job.accelerator, onprem_inputs(session, job.accelerator, raw))
    # The legacy reserved_utilisation_fraction only shapes reserved.amortised_total.
    legacy = Decimal(request.reserved_utilisation_fraction)
    result = core_quote.price_all(
        jobs=[j for j, _ in jobs], offers=offers, timings=timings, onprem=onprem,
        options=options, policy=policy, today=now.date().toordinal(), version_id=version_id,
        gated=gated, unconverted=unconverted)
    return Computed(result=result, options=options, request_fraction=legacy,
                    conversion=conversion, num_offers=len(offers))


def plausibility_warnings(lines: Sequence[QuoteLine], max_reasonable_train_s: float | None,
                          ) -> dict[int, list[str]]:
    """Plans nobody would run (service/core/plausibility.py), by ``id(line)``: a training
    line whose wall clock exceeds ``max_reasonable_train_s`` (CQ_MAX_REASONABLE_TRAIN_DAYS;
    a serving fleet runs as long as asked), and a feasible line whose ``total`` is over ten
    times the cheapest feasible line's of the same answer.
    Lines without warnings are absent. Advisory: not part of what ``verify`` compares."""
    priced = [x for x in lines if x.feasible and x.amounts is not None]
    currency = priced[0].currency if priced else PRICING_CURRENCY
    costly = costly_warnings([x.amounts.total for x in priced if x.amounts is not None],
                             currency)
    out: dict[int, list[str]] = {}
    for line, ratio_warning in zip(priced, costly, strict=True):
        assert line.amounts is not None  # noqa: S101 - filtered above
        # A serving fleet runs for the duration it was asked for: only training is "long".
        long_run = None if line.serving is not None else long_run_warning(
            line.amounts.wall_clock_s, max_reasonable_train_s)
        found = [w for w in (long_run, ratio_warning) if w]
        if found:
            out[id(line)] = found
    return out


def best_per_provider_term(lines: Sequence[QuoteLine]) -> list[QuoteLine]:
    """The first (best) line of each (provider, term), in the lines' order."""
    seen: set[tuple[str, str]] = set()
    best: list[QuoteLine] = []
    for line in lines:
        key = (line.provider, line.term)
        if key not in seen:
            seen.add(key)
            best.append(line)
    return best


def rejected_json(computed: Computed) -> dict[str, Any]:
    groups = Counter((r.provider, r.instance_type, r.code, r.reason)
                     for r in computed.result.rejected)
    return {
        "count": len(computed.result.rejected),
        "groups": [{"provider": p, "instance_type": i, "code": c, "reason": m, "offers": n}
                   for (p, i, c, m), n in sorted(groups.items())],
    }


def serving_warnings(request: QuoteRequest) -> list[str]:
    """What the serving estimate behind a serving quote warns of for lack of validation
    (``serving.unvalidated_warnings``: the MoE gap, decision 144, and a TTFT SLO at a request
    rate, decision 150), for every serving line: a budget is gated on those lines."""
    spec = request.workload.serving
    if spec is None:
        return []
    given = spec.estimate if spec.estimate is not None else spec.plan
    assert given is not None  # noqa: S101 - the schema requires one of the two
    return serving.unvalidated_warnings(given.model.to_core(), given.traffic.to_core())


def quote_body(computed: Computed, request: QuoteRequest, all_lines: bool,
               max_reasonable_train_s: float | None = None) -> tuple[dict[str, Any], str]:
    """(the answer, every line as the stored JSON text ``{"lines":[...]}``): the answer holds
    the best line per provider and term unless ``all_lines``; every line is stored for
    ``GET /v1/quotes/{id}/lines`` and ``verify``. Lines over ``max_reasonable_train_s`` or ten
    times the cheapest carry warnings. Each line's JSON is built once (``line_json``): the
    stored text and the answer's lines are the same dicts."""
    result = computed.result
    fraction = computed.request_fraction
    warned = plausibility_warnings(result.lines, max_reasonable_train_s)
    if said := serving_warnings(request):
        # What the serving estimate warns of (decisions 144 and 150) reaches the lines a
        # budget is gated on, and their stored copies.
        for line in result.lines:
            if line.serving is not None:
                warned[id(line)] = [*warned.get(id(line), ()), *said]
    built = {id(x): line_json(x, fraction, computed.conversion, warned.get(id(x), ()))
             for x in result.lines}
    every = lines_text(list(built.values()))

    def one(line: QuoteLine | None) -> dict[str, Any] | None:
        # The shown, cheapest, fastest and recommended lines are lines of ``result.lines``.
        return None if line is None else built[id(line)]

    shown = result.lines if all_lines else best_per_provider_term(result.lines)
    totals = sorted(result.summary_totals)

    policy = result.policy
    body = {
        "accounting": computed.options.accounting.value,
        "lines": [one(x) for x in shown],
        "lines_total": len(result.lines),
        "lines_shown": "all" if all_lines else "best_per_provider_term",
        "rejected_offers": rejected_json(computed),
        "cheapest": one(result.cheapest),
        "cheapest_per_term": {k: one(v) for k, v in result.cheapest_per_term.items()},
        "fastest": one(result.fastest),
        "recommended": one(result.recommended),
        "summary": {
            "lines": len(result.lines), "feasible_lines": len(totals),
            "min_total": cents_text(totals[0]) if totals else None,
            "median_total": cents_text(_median(totals)) if totals else None,
            "max_total": cents_text(totals[-1]) if totals else None,
            "currency": computed.options.currency,
        },
        "budget": request.budget.model_dump() if request.budget else None,
        "deadline_s": request.deadline_s,
        "verdict": result.verdict.value if result.verdict else None,
        "reasons": [r.message for r in result.reasons],
        "reason_details": [rule_json(r) for r in result.reasons],
        "policy_result": {
            "name": policy.name, "revision": policy.revision,
            "builtin": policy.revision is None, "outcome": result.policy_outcome.value,
            "rules": [rule_json(r) for r in (result.recommended.rules
                                             if result.recommended else result.reasons)],
            "policy": policy_json(policy),
        },
    }
    return body, every


def _median(values: Sequence[Decimal]) -> Decimal:
    n = len(values)
    middle = n // 2
    return values[middle] if n % 2 else (values[middle - 1] + values[middle]) / 2


ComputeFn = Callable[..., Computed]


def compute_body(session: Session, request: QuoteRequest, cache: AcceleratorCache,
                 version_id: str, budget: WorkBudget, workers: int, policy: Policy,
                 now: dt.datetime, *, gated: bool, offer_cache: OfferCache | None = None,
                 fx_version: str | None = None, book_revision: int | None = None,
                 max_reasonable_train_s: float | None = None,
                 calibration: StoredCalibration | None = None,
                 ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``compute_text`` with every line as a dict (what ``verify`` compares)."""
    body, lines = compute_text(
        session, request, cache, version_id, budget, workers, policy, now, gated=gated,
        offer_cache=offer_cache, fx_version=fx_version, book_revision=book_revision,
        max_reasonable_train_s=max_reasonable_train_s, calibration=calibration)
    every: list[dict[str, Any]] = json.loads(lines)["lines"]
    return body, every


def compute_text(session: Session, request: QuoteRequest, cache: AcceleratorCache,
                 version_id: str, budget: WorkBudget, workers: int, policy: Policy,
                 now: dt.datetime, *, gated: bool, offer_cache: OfferCache | None = None,
                 fx_version: str | None = None, book_revision: int | None = None,
                 max_reasonable_train_s: float | None = None,
                 calibration: StoredCalibration | None = None,
                 ) -> tuple[dict[str, Any], str]:
    """A quote's one service function before it is stored: read everything it prices from
    (the budget's FX conversion, the policy's limits in its currency, the discount book),
    size the workload, price and judge it once, and render the answer (no id or timestamps)
    and every line as the stored JSON text ``{"lines":[...]}``, written once; its searches
    within ``budget``. ``verify`` passes no ``offer_cache``: it reads the stored
    version again, and it passes the stored quote's FX table version. ``calibration``: the
    user calibration the request's ``calibration_id`` names (the caller resolves it)."""
    conversion = budget_conversion(session, request, version_id, now, fx_version)
    policy, policy_limits = policy_in(session, policy, conversion)
    book = discount_book(session, request.discount_book, book_revision)
    jobs = size_workload(request, cache, budget, workers,
                         None if calibration is None else calibration.calibration())
    computed = price(session, request, jobs, version_id, policy, now, gated=gated,
                     offer_cache=offer_cache, conversion=conversion, book=book)
    body, lines = quote_body(computed, request, all_lines=False,
                             max_reasonable_train_s=max_reasonable_train_s)
    body["fx"] = fx_json(conversion, request.fx_date or now.date(), policy_limits)
    body["discount_book"] = (None if book is None
                             else {"name": book.name, "revision": book.revision})
    if calibration is not None:
        body["calibration"] = calibration.ref()
    return body, lines
