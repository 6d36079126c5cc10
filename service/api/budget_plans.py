"""``POST /v1/budget-plans``: the lines a budget buys soonest, the cheapest before a deadline,
and the largest compute-optimal model a budget and deadline can train. Lines are judged like
quotes (commitment accounting by default, the policy's rules)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from decimal import Decimal
from typing import Any

from sqlalchemy.orm import Session

from service.api.deps import AcceleratorCache
from service.api.presentation import money
from service.api.quoting import (
    Computed,
    budget_conversion,
    discount_book,
    fx_json,
    line_json,
    optimised_jobs,
    plausibility_warnings,
    policy_in,
    price,
)
from service.api.schemas.estimate import ModelIn
from service.api.schemas.quotes import BudgetPlanOut, BudgetPlanRequest
from service.api.work import WorkBudget
from service.catalog.fx import Conversion
from service.core.discounts import DiscountBook
from service.core.errors import CoreError, InvalidSpecError, NoFeasiblePlanError
from service.core.params import count_parameters
from service.core.policy import Outcome, Policy, RuleResult
from service.core.quote import QuoteLine
from service.core.units import SECONDS_PER_DAY
from service.settings import Settings


def budget_plan(body: BudgetPlanRequest, session: Session, accelerators: AcceleratorCache,
                settings: Settings, version_id: str, policy: Policy,
                now: dt.datetime, budget: WorkBudget) -> BudgetPlanOut:
    """The answer, for either objective; every search within ``budget``."""
    conversion = budget_conversion(session, body, version_id, now)
    policy, policy_limits = policy_in(session, policy, conversion)
    book = discount_book(session, body.discount_book)
    extra: dict[str, Any] = {"objective": body.objective}
    if body.objective == "largest_model":
        computed, tried, largest = _largest_model(body, session, accelerators, settings,
                                                  version_id, policy, now, budget, conversion,
                                                  book)
        extra["models_tried"] = tried
        extra["largest_model"] = largest
    else:
        assert body.model is not None  # noqa: S101 - the schema requires it for 'soonest'
        jobs = optimised_jobs(accelerators, body.model, body.training, body.clusters,
                              body.constraints, body.energy.to_core(), "",
                              settings.search_workers, budget)
        computed = price(session, body, jobs, version_id, policy, now, gated=True,
                         conversion=conversion, book=book)
    within, in_time = _plan_lists(computed)
    fraction = computed.request_fraction
    warned = plausibility_warnings(computed.result.lines,
                                   settings.max_reasonable_train_days * SECONDS_PER_DAY)
    return BudgetPlanOut.model_validate({
        "soonest_within_budget": [line_json(x, fraction, conversion, warned.get(id(x), ()))
                                  for x in within[: body.top_k]],
        "cheapest_before_deadline": [line_json(x, fraction, conversion, warned.get(id(x), ()))
                                     for x in in_time[: body.top_k]],
        "catalog_version": version_id, "budget": body.budget.model_dump(),
        "deadline_s": body.deadline_s, "accounting": body.accounting,
        "policy": {"name": policy.name, "revision": policy.revision},
        "explanation": _explain(computed, within, in_time), **extra,
        "fx": fx_json(conversion, body.fx_date or now.date(), policy_limits),
    })


def _plan_lists(computed: Computed) -> tuple[list[QuoteLine], list[QuoteLine]]:
    """(lines within the budget, soonest first; lines meeting the deadline, cheapest first),
    leaving out lines a policy rule other than the budget or deadline fails."""
    lines = [x for x in computed.result.lines
             if (x.feasible and x.outcome is not Outcome.FAIL) or _only_budget_or_deadline(x)]
    within = sorted((x for x in lines if x.within_budget),
                    key=lambda x: (x.amounts.wall_clock_s if x.amounts else 0.0,
                                   x.amounts.total if x.amounts else Decimal(0)))
    in_time = [x for x in lines if x.meets_deadline is not False]
    return within, in_time


DEFAULT_LARGEST_CANDIDATES = ("llama3.1-8b", "llama2-13b", "llama3.1-70b", "llama3.1-405b")
"""Dense presets tried by 'largest_model' by default (MoE models have no agreed
compute-optimal token ratio)."""


def _largest_model(
    body: BudgetPlanRequest, session: Session, accelerators: AcceleratorCache,
    settings: Settings, version_id: str, policy: Policy, now: dt.datetime,
    budget: WorkBudget, conversion: Conversion | None, book: DiscountBook | None,
) -> tuple[Computed, list[dict[str, Any]], dict[str, Any] | None]:
    """Try candidate models from the smallest up, each on tokens_per_param × its parameters;
    stop at the first that has no line within the budget and deadline (a larger one costs
    more: compute grows with parameters × tokens, so with parameters squared)."""
    names = body.candidate_models or list(DEFAULT_LARGEST_CANDIDATES)
    sized: list[tuple[int, str, ModelIn]] = []
    for index, name in enumerate(names):
        try:
            model_in = ModelIn(preset=name)
            params = count_parameters(model_in.to_core()).total
        except (CoreError, ValueError) as exc:
            raise InvalidSpecError(str(exc), field=f"candidate_models.{index}") from None
        sized.append((int(params), name, model_in))
    tried: list[dict[str, Any]] = []
    best: tuple[Computed, dict[str, Any]] | None = None
    last: Computed | None = None
    for params, name, model_in in sorted(sized):
        tokens = body.tokens_per_param * params
        training = body.training.model_copy(update={"tokens": tokens})
        try:
            jobs = optimised_jobs(accelerators, model_in, training, body.clusters,
                                  body.constraints, body.energy.to_core(), "",
                                  settings.search_workers, budget)
        except NoFeasiblePlanError:
            tried.append({"preset": name, "params": params, "tokens": tokens,
                          "lines_within": 0, "note": "does not fit in memory on any "
                                                     "candidate cluster"})
            break
        computed = price(session, body, jobs, version_id, policy, now, gated=True,
                         conversion=conversion, book=book)
        last = computed
        ok = [x for x in computed.result.lines if x.feasible and x.outcome is not Outcome.FAIL]
        tried.append({"preset": name, "params": params, "tokens": tokens,
                      "lines_within": len(ok), "note": (
                          "fits the budget and deadline" if ok else _why_none(computed))})
        if not ok:
            break
        cheapest = min(ok, key=QuoteLine.sort_key)
        best = (computed, {"preset": name, "params": params, "tokens": tokens,
                           "line": line_json(cheapest, computed.request_fraction,
                                             computed.conversion)})
    if best is not None:
        return best[0], tried, best[1]
    if last is None:
        raise NoFeasiblePlanError("no candidate model fits in memory on the candidate clusters")
    return last, tried, None


def _only_budget_or_deadline(line: QuoteLine) -> bool:
    """A feasible line whose only failures are the budget or the deadline (kept: the two
    lists filter on those themselves)."""
    fails = {r.rule for r in line.rules if r.outcome is Outcome.FAIL}
    return line.feasible and bool(fails) and fails <= {"budget", "deadline"}


def _policy_failures(line: QuoteLine) -> list[RuleResult]:
    """The rules other than the budget and the deadline that fail ``line``."""
    return [r for r in line.rules
            if r.outcome is Outcome.FAIL and r.rule not in ("budget", "deadline")]


def _named(rule: RuleResult) -> str:
    """A failed rule as the explanation names it: rule, code, and the rule's own reason
    (which says how to fix it where the rule knows, e.g. the price-date rules)."""
    return f"{rule.rule} ({rule.code}): {rule.message}"


def _blocked(label: str, lines: list[QuoteLine], currency: str) -> str:
    """Why none of ``lines`` (the ones within the budget, or before the deadline) is in its
    list: the rules that failed them, the first line's own reason, and how many lines each
    rule failed (issue 39: the budget plan said "nothing fits the budget" of lines that fit
    it and failed the price-date rule)."""
    first = min(lines, key=QuoteLine.sort_key)
    total = first.amounts.total if first.amounts else None
    failed = Counter(f"{r.rule} ({r.code})" for x in lines for r in _policy_failures(x))
    reasons = _policy_failures(first)
    head = (f"{len(lines)} lines are {label} but the policy fails each of them; the "
            f"cheapest, {_where(first)}"
            + (f" at {money(str(total), currency)}" if total is not None else "")
            + ", fails " + "; ".join(_named(r) for r in reasons))
    return head + ("; rules failed: " + ", ".join(
        f"{rule} on {n} lines" for rule, n in failed.most_common(5)) if failed else "")


def _where(line: QuoteLine) -> str:
    return " ".join(str(p) for p in (line.num_gpus, "×", line.provider, line.region,
                                     line.instance_type, line.term.value) if p)


def _why_none(computed: Computed) -> str:
    """A largest_model candidate's note when no line passes: the budget, the deadline, or
    the policy rule that failed the lines that met both (named, with its reason)."""
    feasible = [x for x in computed.result.lines if x.feasible]
    if not feasible:
        return "no offer can run it"
    both = [x for x in feasible if x.within_budget is not False and x.meets_deadline
            is not False]
    if both:
        return _blocked("within the budget and the deadline", both,
                        computed.options.currency)
    return "no line within the budget and the deadline"


def _explain(computed: Computed, within: list[QuoteLine], in_time: list[QuoteLine]) -> str:
    """Why the lists are empty, when they are: no offer can run the plans, nothing is within
    the budget or before the deadline (with the cheapest total or the fastest time), or the
    lines that are fail a policy rule, named with its reason."""
    result = computed.result
    if within and in_time:
        return ""
    feasible = [x for x in result.lines if x.feasible]
    parts: list[str] = []
    currency = computed.options.currency
    if not feasible:
        parts.append("no offer can run any candidate plan"
                     + (f" ({len(result.rejected)} offers cannot host the plans)"
                        if result.rejected else ""))
    else:
        fits = [x for x in feasible if x.within_budget]
        meets = [x for x in feasible if x.meets_deadline is not False]
        if not within:
            if fits:
                parts.append(_blocked("within the budget", fits, currency))
            else:
                cheapest = min(x.amounts.total for x in feasible if x.amounts)
                parts.append(f"nothing fits the budget: the cheapest line's "
                             f"{computed.options.accounting.value} total is "
                             f"{money(str(cheapest), currency)}")
        if not in_time:
            same = (not within and fits and meets and min(fits, key=QuoteLine.sort_key)
                    is min(meets, key=QuoteLine.sort_key))
            if same:
                parts.append(f"the policy fails each of the {len(meets)} lines before the "
                             "deadline too, the same cheapest line first")
            elif meets:
                parts.append(_blocked("before the deadline", meets, currency))
            else:
                fastest = min(x.amounts.wall_clock_s for x in feasible if x.amounts)
                parts.append(f"nothing meets the deadline: the fastest line takes "
                             f"{fastest / 86400:,.1f} days")
    return "; ".join(parts)
