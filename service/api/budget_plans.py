"""``POST /v1/budget-plans``: the lines a budget buys soonest, the cheapest before a deadline,
and the largest compute-optimal model a budget and deadline can train. Lines are judged like
quotes (commitment accounting by default, the policy's rules)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass
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
from service.core.errors import CoreError, InvalidSpecError, NoFeasiblePlanError, NoLayoutError
from service.core.params import count_parameters
from service.core.policy import Outcome, Policy, RuleResult
from service.core.quote import QuoteLine
from service.core.scaling import (
    CHINCHILLA_TOKENS_PER_PARAM,
    SHAPE_RULE,
    GeneratedSize,
    generated_family,
)
from service.core.search import SearchTooLargeError
from service.core.units import SECONDS_PER_DAY
from service.settings import Settings


def budget_plan(
    body: BudgetPlanRequest,
    session: Session,
    accelerators: AcceleratorCache,
    settings: Settings,
    version_id: str,
    policy: Policy,
    now: dt.datetime,
    budget: WorkBudget,
) -> BudgetPlanOut:
    """The answer, for either objective; every search within ``budget``."""
    conversion = budget_conversion(session, body, version_id, now)
    policy, policy_limits = policy_in(session, policy, conversion)
    book = discount_book(session, body.discount_book)
    extra: dict[str, Any] = {"objective": body.objective}
    why = ""  # largest_model: what bound the answer (after why a list is empty, if one is)
    if body.objective == "largest_model":
        answer = _largest_model(
            body, session, accelerators, settings, version_id, policy, now, budget, conversion, book
        )
        computed = answer.computed
        extra["models_tried"] = answer.tried
        extra["largest_model"] = answer.largest
        extra["binding_constraint"] = answer.bound
        why = answer.explanation
    else:
        assert body.model is not None  # noqa: S101 - the schema requires it for 'soonest'
        jobs = optimised_jobs(
            accelerators,
            body.model,
            body.training,
            body.clusters,
            body.constraints,
            body.energy.to_core(),
            "",
            settings.search_workers,
            budget,
        )
        computed = price(
            session,
            body,
            jobs,
            version_id,
            policy,
            now,
            gated=True,
            conversion=conversion,
            book=book,
        )
    within, in_time = _plan_lists(computed)
    fraction = computed.request_fraction
    warned = plausibility_warnings(
        computed.result.lines, settings.max_reasonable_train_days * SECONDS_PER_DAY
    )
    return BudgetPlanOut.model_validate(
        {
            "soonest_within_budget": [
                line_json(x, fraction, conversion, warned.get(id(x), ()))
                for x in within[: body.top_k]
            ],
            "cheapest_before_deadline": [
                line_json(x, fraction, conversion, warned.get(id(x), ()))
                for x in in_time[: body.top_k]
            ],
            "catalog_version": version_id,
            "budget": body.budget.model_dump(),
            "deadline_s": body.deadline_s,
            "accounting": body.accounting,
            "policy": {"name": policy.name, "revision": policy.revision},
            "explanation": "; ".join(x for x in (_explain(computed, within, in_time), why) if x),
            **extra,
            "fx": fx_json(conversion, body.fx_date or now.date(), policy_limits),
        }
    )


def _plan_lists(computed: Computed) -> tuple[list[QuoteLine], list[QuoteLine]]:
    """(lines within the budget, soonest first; lines meeting the deadline, cheapest first),
    leaving out lines a policy rule other than the budget or deadline fails."""
    lines = [
        x
        for x in computed.result.lines
        if (x.feasible and x.outcome is not Outcome.FAIL) or _only_budget_or_deadline(x)
    ]
    within = sorted(
        (x for x in lines if x.within_budget),
        key=lambda x: (
            x.amounts.wall_clock_s if x.amounts else 0.0,
            x.amounts.total if x.amounts else Decimal(0),
        ),
    )
    in_time = [x for x in lines if x.meets_deadline is not False]
    return within, in_time


DEFAULT_LARGEST_CANDIDATES = ("llama3.1-8b", "llama2-13b", "llama3.1-70b", "llama3.1-405b")
"""The dense presets the preset ladder used to try by default (issue 39 replaced the default by
the generated family; kept for callers that name them)."""

MAX_SEARCH_STEPS = 12
"""Sizes one continuous 'largest_model' search prices at most: the bisection over the
generated family (256 sizes) needs 1 + log2(256) = 9; each step runs one plan search per
(accelerator, GPU count) and is charged to the request's ``WorkBudget``."""


@dataclass(frozen=True, slots=True)
class _Size:
    """One model size, to be priced: a preset or a generated size."""

    name: str
    model_in: ModelIn
    params: int
    architecture: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class _Tried:
    size: _Size
    tokens: float
    computed: Computed | None
    ok: tuple[QuoteLine, ...]
    bound: str | None
    note: str

    def json(self) -> dict[str, Any]:
        return {
            "preset": self.size.name,
            "params": self.size.params,
            "tokens": self.tokens,
            "lines_within": len(self.ok),
            "note": self.note,
            "architecture": self.size.architecture,
            "bound": self.bound,
        }


def _generated_size(size: GeneratedSize) -> _Size:
    m = size.model
    architecture = {
        "num_layers": m.num_layers,
        "hidden_size": m.hidden_size,
        "num_heads": m.num_heads,
        "num_kv_heads": m.num_kv_heads,
        "ffn_hidden_size": m.ffn_hidden_size,
        "vocab_size": m.vocab_size,
        "mlp": m.mlp.value,
    }
    model_in = ModelIn(
        name=m.name,
        num_layers=m.num_layers,
        hidden_size=m.hidden_size,
        num_heads=m.num_heads,
        num_kv_heads=m.num_kv_heads,
        ffn_hidden_size=m.ffn_hidden_size,
        vocab_size=m.vocab_size,
        mlp=m.mlp,
    )
    return _Size(m.name, model_in, size.params, architecture)


def _preset_sizes(names: list[str]) -> list[_Size]:
    sized: list[_Size] = []
    for index, name in enumerate(names):
        try:
            model_in = ModelIn(preset=name)
            params = count_parameters(model_in.to_core()).total
        except (CoreError, ValueError) as exc:
            raise InvalidSpecError(str(exc), field=f"candidate_models.{index}") from None
        sized.append(_Size(name, model_in, int(params), None))
    return sorted(sized, key=lambda x: (x.params, x.name))


@dataclass(frozen=True, slots=True)
class Largest:
    """The 'largest_model' answer: the computed lines shown, the sizes tried (in the order
    priced), the answer (None: no size fits), what bound it, and the explanation."""

    computed: Computed
    tried: list[dict[str, Any]]
    largest: dict[str, Any] | None
    bound: str
    explanation: str


def _largest_model(
    body: BudgetPlanRequest,
    session: Session,
    accelerators: AcceleratorCache,
    settings: Settings,
    version_id: str,
    policy: Policy,
    now: dt.datetime,
    budget: WorkBudget,
    conversion: Conversion | None,
    book: DiscountBook | None,
) -> Largest:
    """The largest size with a line within the budget and deadline that no policy rule fails,
    each size trained on tokens_per_param × its parameters. Named candidate_models are tried
    from the smallest up, stopping at the first without a line; otherwise the generated
    family (service/core/scaling.py) is bisected on parameter count: compute grows with
    parameters × tokens, so with parameters squared, and memory with parameters, so a size
    that has no line has no larger one that has (the search's premise)."""

    def attempt(size: _Size) -> _Tried:
        tokens = body.tokens_per_param * size.params
        training = body.training.model_copy(update={"tokens": tokens})
        try:
            jobs = optimised_jobs(
                accelerators,
                size.model_in,
                training,
                body.clusters,
                body.constraints,
                body.energy.to_core(),
                "",
                settings.search_workers,
                budget,
            )
        except NoLayoutError as exc:
            return _Tried(
                size,
                tokens,
                None,
                (),
                "memory",
                f"no layout of the candidate GPU counts runs it: {exc}",
            )
        except NoFeasiblePlanError:
            return _Tried(
                size, tokens, None, (), "memory", "does not fit in memory on any candidate cluster"
            )
        computed = price(
            session,
            body,
            jobs,
            version_id,
            policy,
            now,
            gated=True,
            conversion=conversion,
            book=book,
        )
        ok = tuple(x for x in computed.result.lines if x.feasible and x.outcome is not Outcome.FAIL)
        if ok:
            return _Tried(size, tokens, computed, ok, None, "fits the budget and deadline")
        bound, note = _bound_of(computed)
        return _Tried(size, tokens, computed, ok, bound, note)

    done: list[_Tried] = []
    best: _Tried | None = None
    above: _Tried | None = None  # the smallest size tried that has no line
    bound = "search_range"
    searched = ""
    if body.candidate_models:
        for size in _preset_sizes(body.candidate_models):
            step = attempt(size)
            done.append(step)
            if not step.ok:
                above = step
                break
            best = step
        if above is None:
            searched = "the largest of candidate_models fits (name larger presets to go on)"
    else:
        family = generated_family()
        low, high = 0, len(family)  # family[low] fits once tried; high: no size tried fails
        first = attempt(_generated_size(family[0]))
        done.append(first)
        charges: list[int] = []
        if first.ok:
            best = first
            while high - low > 1 and len(done) < MAX_SEARCH_STEPS:
                per_step = max(charges, default=0)
                if budget.remaining < per_step:
                    bound = "work_budget"
                    break
                mid = (low + high) // 2
                before = budget.remaining
                try:
                    step = attempt(_generated_size(family[mid]))
                except SearchTooLargeError:
                    bound = "work_budget"
                    break
                charges.append(before - budget.remaining)
                done.append(step)
                if step.ok:
                    low, best = mid, step
                else:
                    high, above = mid, step
        else:
            above = first
        searched = (
            f"searched {len(done)} of the {len(family)} generated sizes by bisection "
            f"on parameters ({MAX_SEARCH_STEPS} at most); {SHAPE_RULE}"
        )
        if bound == "work_budget":
            left = (
                f"; the request's candidate budget (CQ_SEARCH_MAX_CANDIDATES, "
                f"{budget.limit:,}) ended the search with {budget.remaining:,} candidates "
                f"left, so a size between {family[low].params / 1e9:,.2f}B and "
                + (
                    f"{family[high].params / 1e9:,.2f}B"
                    if high < len(family)
                    else "the family's largest"
                )
                + " may also fit"
            )
            searched += left
    if bound != "work_budget" and above is not None:
        # The smallest size tried without a line (the bisection's last failure) bound it.
        bound = above.bound or "budget"
    shown = best if best is not None else (above if above is not None else done[-1])
    if shown.computed is None:
        raise NoFeasiblePlanError(
            f"no model size fits in memory on the candidate clusters: the smallest tried, "
            f"{shown.size.name} ({shown.size.params / 1e9:,.2f}B parameters), "
            f"{shown.note}"
        )
    computed = shown.computed
    largest = None
    if best is not None and best.computed is not None:
        cheapest = min(best.ok, key=QuoteLine.sort_key)
        share = _share(cheapest, best.computed)
        largest = {
            "preset": best.size.name,
            "params": best.size.params,
            "tokens": best.tokens,
            "line": line_json(cheapest, best.computed.request_fraction, best.computed.conversion),
            "architecture": best.size.architecture,
            "shape_rule": SHAPE_RULE if best.size.architecture is not None else None,
            "tokens_rule": _tokens_rule(body.tokens_per_param),
            "share_of_budget": share,
        }
    text = _largest_explanation(best, above, bound, searched, body.tokens_per_param)
    return Largest(computed, [x.json() for x in done], largest, bound, text)


def _share(line: QuoteLine, computed: Computed) -> float | None:
    budget = computed.options.budget
    if line.amounts is None or not budget:
        return None
    return float(line.amounts.total / budget)


def _tokens_rule(ratio: float) -> str:
    return (
        f"tokens = {ratio:g} × parameters (tokens_per_param; Hoffmann et al. 2022, "
        f"'Chinchilla': compute-optimal at about {CHINCHILLA_TOKENS_PER_PARAM:g})"
    )


BOUND_WORDS = {
    "budget": "the budget",
    "deadline": "the deadline",
    "memory": "memory",
    "policy": "the policy",
    "no_offer": "the offers (none can run it)",
    "search_range": "the search's range",
    "work_budget": "the request's work budget",
}


def _size_words(tried: _Tried) -> str:
    arch = tried.size.architecture
    shape = (
        f", {arch['num_layers']} layers × hidden {arch['hidden_size']:,}, "
        f"{arch['num_heads']} heads ({arch['num_kv_heads']} KV), ffn "
        f"{arch['ffn_hidden_size']:,}, vocabulary {arch['vocab_size']:,}"
        if arch is not None
        else ""
    )
    return (
        f"{tried.size.name} ({tried.size.params / 1e9:,.2f}B parameters{shape}; "
        f"{tried.tokens:,.3g} tokens)"
    )


def _largest_explanation(
    best: _Tried | None, above: _Tried | None, bound: str, searched: str, ratio: float
) -> str:
    """What bound the answer, always: the budget, the deadline, memory or the policy (the
    rule named), from the smallest size tried that has no line; or the search's range or
    the request's work budget."""
    parts: list[str] = []
    if best is not None and best.computed is not None:
        cheapest = min(best.ok, key=QuoteLine.sort_key)
        share = _share(cheapest, best.computed)
        total = cheapest.amounts.total if cheapest.amounts else None
        currency = best.computed.options.currency
        parts.append(
            f"largest model: {_size_words(best)}; its cheapest line, {_where(cheapest)}"
            + (f", costs {money(str(total), currency)}" if total is not None else "")
            + (f" ({share:.0%} of the budget)" if share is not None else "")
        )
    else:
        parts.append("no model size has a line within the budget and the deadline")
    words = BOUND_WORDS.get(bound, bound)
    if above is not None and bound == above.bound:
        larger = "the next larger size tried" if best is not None else "the smallest size"
        parts.append(f"bound by {words}: {larger}, {_size_words(above)}: {above.note}")
    else:
        parts.append(f"bound by {words}")
    parts.append(_tokens_rule(ratio))
    if searched:
        parts.append(searched)
    return "; ".join(parts)


def _bound_of(computed: Computed) -> tuple[str, str]:
    """(bound, note) of a size none of whose lines passes. Among the lines no rule but the
    budget and deadline fails: none within the budget is 'budget', none of those before the
    deadline 'deadline'; when the policy fails every line (or every line within the budget
    and deadline is one it fails and no other is), 'policy', the rule named with its reason.
    Lines within both that a rule fails are named in the note too (issue 39: spot lines within
    the budget that the capacity rule fails do not hide that the rest exceed it)."""
    feasible = [x for x in computed.result.lines if x.feasible]
    currency = computed.options.currency
    if not feasible:
        return "no_offer", "no offer can run it"
    both = [x for x in feasible if x.within_budget is not False and x.meets_deadline is not False]
    blocked = _blocked("within the budget and the deadline", both, currency) if both else ""
    allowed = [x for x in feasible if not _policy_failures(x)]
    if not allowed:
        return "policy", blocked or _blocked("priced", feasible, currency)
    in_budget = [x for x in allowed if x.within_budget is not False]
    if not in_budget:
        cheapest = min(allowed, key=QuoteLine.sort_key)
        total = cheapest.amounts.total if cheapest.amounts else None
        share = _share(cheapest, computed)
        note = (
            "nothing fits the budget: the cheapest line the policy allows has a "
            f"{computed.options.accounting.value} total of "
            + (money(str(total), currency) if total is not None else "unknown")
            + (f" ({share:.0%} of the budget)" if share is not None else "")
        )
        return "budget", note + (f"; besides, {blocked}" if blocked else "")
    fastest = min((x.amounts.wall_clock_s for x in in_budget if x.amounts), default=None)
    deadline = computed.options.deadline_s
    note = (
        f"{len(in_budget)} lines the policy allows are within the budget but none meets "
        "the deadline"
        + (f": the fastest takes {fastest / 86400:,.1f} days" if fastest is not None else "")
        + (f" against {deadline / 86400:,.1f}" if deadline else "")
    )
    return "deadline", note + (f"; besides, {blocked}" if blocked else "")


def _only_budget_or_deadline(line: QuoteLine) -> bool:
    """A feasible line whose only failures are the budget or the deadline (kept: the two
    lists filter on those themselves)."""
    fails = {r.rule for r in line.rules if r.outcome is Outcome.FAIL}
    return line.feasible and bool(fails) and fails <= {"budget", "deadline"}


def _policy_failures(line: QuoteLine) -> list[RuleResult]:
    """The rules other than the budget and the deadline that fail ``line``."""
    return [
        r for r in line.rules if r.outcome is Outcome.FAIL and r.rule not in ("budget", "deadline")
    ]


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
    head = (
        f"{len(lines)} lines are {label} but the policy fails each of them; the "
        f"cheapest, {_where(first)}"
        + (f" at {money(str(total), currency)}" if total is not None else "")
        + ", fails "
        + "; ".join(_named(r) for r in reasons)
    )
    return head + (
        "; rules failed: " + ", ".join(f"{rule} on {n} lines" for rule, n in failed.most_common(5))
        if failed
        else ""
    )


def _where(line: QuoteLine) -> str:
    return " ".join(
        str(p)
        for p in (
            line.num_gpus,
            "×",
            line.provider,
            line.region,
            line.instance_type,
            line.term.value,
        )
        if p
    )


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
        parts.append(
            "no offer can run any candidate plan"
            + (f" ({len(result.rejected)} offers cannot host the plans)" if result.rejected else "")
        )
    else:
        fits = [x for x in feasible if x.within_budget]
        meets = [x for x in feasible if x.meets_deadline is not False]
        if not within:
            if fits:
                parts.append(_blocked("within the budget", fits, currency))
            else:
                cheapest = min(x.amounts.total for x in feasible if x.amounts)
                parts.append(
                    f"nothing fits the budget: the cheapest line's "
                    f"{computed.options.accounting.value} total is "
                    f"{money(str(cheapest), currency)}"
                )
        if not in_time:
            same = (
                not within
                and fits
                and meets
                and min(fits, key=QuoteLine.sort_key) is min(meets, key=QuoteLine.sort_key)
            )
            if same:
                parts.append(
                    f"the policy fails each of the {len(meets)} lines before the "
                    "deadline too, the same cheapest line first"
                )
            elif meets:
                parts.append(_blocked("before the deadline", meets, currency))
            else:
                fastest = min(x.amounts.wall_clock_s for x in feasible if x.amounts)
                parts.append(
                    f"nothing meets the deadline: the fastest line takes "
                    f"{fastest / 86400:,.1f} days"
                )
    return "; ".join(parts)
