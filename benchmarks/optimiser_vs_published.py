"""The optimiser against published layouts: ``make optimiser-vs-published``.

For every usable validation row (``benchmarks/data/published-runs.csv``), search the full
space on the row's GPUs, global batch and sequence length, and compare, under our own model:
- the best plan's predicted tokens/s with the published layout's predicted tokens/s;
- whether the published layout is among the optimiser's top 10.
The best plan must never be slower than a published layout that fits and lies in the search
space; ``check()`` returns the rows where it is (a search bug), and a test calls it.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time
from dataclasses import dataclass

from benchmarks.accuracy import RowInputs, evaluate, usable_inputs
from service.core.errors import NoFeasiblePlanError
from service.core.search import SearchRequest, SearchSpace, search

TOP = 10


@dataclass(frozen=True, slots=True)
class Comparison:
    row: str
    published_tokens_per_s: float
    published_fits: bool
    in_space: bool
    best_tokens_per_s: float | None
    published_rank: int | None
    best_plan: str

    @property
    def gain(self) -> float | None:
        if self.best_tokens_per_s is None:
            return None
        return self.best_tokens_per_s / self.published_tokens_per_s - 1.0


def _describe(plan: object) -> str:
    p = plan
    return (f"t{p.tp}p{p.pp}d{p.dp}c{p.cp}e{p.ep}v{p.vp}b{p.micro_batch}"  # type: ignore[attr-defined]
            f"z{p.zero_stage}{p.recompute.value[0]}{'s' if p.sequence_parallel else ''}")  # type: ignore[attr-defined]


def compare(inputs: RowInputs) -> Comparison:
    published = evaluate(inputs)
    plan = published.plan
    max_tp = max(inputs.cluster.gpus_per_node, plan.tp)
    request = SearchRequest(model=inputs.model, clusters=(inputs.cluster,),
                            training=inputs.training, space=SearchSpace(max_tp=max_tp),
                            top_k=TOP, deadline_s=600.0)
    layout_ok = (-(-inputs.model.num_layers // plan.pp)) % plan.vp == 0
    try:
        result = search(request, clock=time.perf_counter)
    except NoFeasiblePlanError:
        return Comparison(inputs.id, published.estimate.throughput.tokens_per_s,
                          bool(published.estimate.memory.fits), layout_ok, None, None, "-")
    plans = [p.plan for p in result.plans]
    normalised = dataclasses.replace(plan, sequence_parallel=plan.sequence_parallel
                                     if plan.tp > 1 else True)
    rank = plans.index(normalised) + 1 if normalised in plans else None
    best = result.plans[0]
    return Comparison(
        row=inputs.id, published_tokens_per_s=published.estimate.throughput.tokens_per_s,
        published_fits=bool(published.estimate.memory.fits), in_space=layout_ok,
        best_tokens_per_s=best.estimate.throughput.tokens_per_s, published_rank=rank,
        best_plan=_describe(best.plan),
    )


def check(comparisons: list[Comparison]) -> list[Comparison]:
    """Rows where the search lost to a published layout it should have found."""
    return [c for c in comparisons
            if c.published_fits and c.in_space and (
                c.best_tokens_per_s is None
                or c.best_tokens_per_s < c.published_tokens_per_s * (1 - 1e-12))]


def main() -> int:
    comparisons = [compare(inputs) for inputs in usable_inputs()]
    print(f"{'row':34} {'published tok/s':>15} {'fits':>5} {'best tok/s':>11} {'gain':>7} "
          f"{'pub. rank':>9}  best plan")
    for c in comparisons:
        gain = f"{c.gain:+.1%}" if c.gain is not None else "-"
        best = f"{c.best_tokens_per_s:,.0f}" if c.best_tokens_per_s is not None else "none"
        rank = str(c.published_rank) if c.published_rank else "-"
        print(f"{c.row:34} {c.published_tokens_per_s:15,.0f} {c.published_fits!s:>5} "
              f"{best:>11} {gain:>7} {rank:>9}  {c.best_plan}")
    gains = [c.gain for c in comparisons if c.gain is not None and c.published_fits]
    in_top = sum(1 for c in comparisons if c.published_rank)
    print(f"\nrows: {len(comparisons)}; published layout fits under our model in "
          f"{sum(c.published_fits for c in comparisons)}; in the optimiser's top {TOP}: "
          f"{in_top}")
    if gains:
        print(f"predicted gain of the best plan over the published layout: median "
              f"{statistics.median(gains):+.1%}, max {max(gains):+.1%}, min {min(gains):+.1%}")
    misses = check(comparisons)
    print(f"rows where the best plan is slower than a fitting published layout: {len(misses)}")
    return 1 if misses else 0


if __name__ == "__main__":
    sys.exit(main())
