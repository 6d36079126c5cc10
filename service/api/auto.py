"""``"auto"`` parallelism fields (issue 15): a caller who does not know a run's virtual
pipeline size, micro-batch or recomputation leaves it to the optimiser, which picks the
fastest value that fits in memory with every other field as given. Deterministic (a frozen
clock, one small space), so a quote that uses it recomputes the same."""

from __future__ import annotations

from service.api.observability import search_attributes, timed_search
from service.api.schemas.estimate import ParallelismIn
from service.core.calibration import DEFAULT_CALIBRATION, Calibration
from service.core.errors import NoFeasiblePlanError
from service.core.search import SearchRequest, SearchSpace, frozen_clock, search
from service.core.specs import ClusterSpec, EnergySpec, ModelSpec, ParallelismPlan, TrainingSpec


def resolve_plan(model: ModelSpec, cluster: ClusterSpec, parallelism: ParallelismIn,
                 training: TrainingSpec, energy: EnergySpec, *,
                 calibration: Calibration = DEFAULT_CALIBRATION,
                 ) -> tuple[ParallelismPlan, tuple[str, ...]]:
    """The plan, with every ``"auto"`` field chosen (under ``calibration``: a user's, issue
    37); and one note per choice."""
    plan = parallelism.to_core(cluster.num_gpus)
    autos = parallelism.auto_dimensions()
    if not autos:
        return plan, ()
    try:
        with timed_search("auto") as current:
            result = search(SearchRequest(
                model=model, clusters=(cluster,), training=training,
                space=SearchSpace(vary=autos, base=plan), top_k=1, energy=energy,
                calibration=calibration), frozen_clock)
            if current is not None:
                current.set_attributes(search_attributes(result))
    except NoFeasiblePlanError as exc:
        raise NoFeasiblePlanError(
            "no value of " + ", ".join(sorted(autos)) + " fits in memory with the other "
            "parallelism fields as given", closest=exc.closest,
            candidates_total=exc.candidates_total) from None
    chosen = result.plans[0].plan
    notes = tuple(f"{name} \"auto\": the optimiser chose {_value(getattr(chosen, name))}, the "
                  "fastest that fits with the other fields as given" for name in sorted(autos))
    return chosen, notes


def _value(value: object) -> str:
    return str(getattr(value, "value", value))
