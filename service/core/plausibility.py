"""Plans nobody would run: warnings for a run too long or too dear to be a real choice.

An estimate or a plan is still answered (it is what was asked), but one that takes longer than
a wall-clock limit (the service's setting, passed in: the core reads no settings), or that
costs more than ``COST_RATIO_LIMIT`` times the cheapest alternative in the same answer, carries
a warning. The wording starts with a stable prefix (``LONG_RUN_PREFIX``, ``COSTLY_PREFIX``)
that clients may match; the rest of the sentence carries the figures.

- ``long_run_warning(train_s, max_reasonable_train_s)``: the wall-clock check.
- ``costly_warnings(costs)``: the ratio check over one answer's alternatives.
- ``WarningDetail`` and ``detail_of``: every warning as a code, a field and the sentence
  (issue 37; the codes are ``WARNING_CODES``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from service.core.units import HOURS_PER_YEAR, SECONDS_PER_DAY, SECONDS_PER_HOUR

DEFAULT_MAX_REASONABLE_TRAIN_S = 365 * SECONDS_PER_DAY
"""A year of wall-clock time: longer than any published pre-training run we know of (the
largest take weeks to a few months), and longer than hardware stays current. A judgement;
the service's default for CQ_MAX_REASONABLE_TRAIN_DAYS."""

COST_RATIO_LIMIT = 10
"""An alternative costing more than ten times the cheapest one in the same answer is not a
choice anyone would make for the same job; a judgement, stated as such."""

LONG_RUN_PREFIX = "impractical wall-clock"
COSTLY_PREFIX = "impractical cost"


def long_run_warning(train_s: float, max_reasonable_train_s: float | None) -> str | None:
    """The warning for a run longer than ``max_reasonable_train_s`` (None: no limit)."""
    if max_reasonable_train_s is None or not train_s > max_reasonable_train_s:
        return None
    days = train_s / SECONDS_PER_DAY
    years = train_s / SECONDS_PER_HOUR / HOURS_PER_YEAR
    limit_days = max_reasonable_train_s / SECONDS_PER_DAY
    return (f"{LONG_RUN_PREFIX}: training takes {days:,.0f} days ({years:,.1f} years), more "
            f"than the {limit_days:,.0f}-day limit for a plan anyone would run")


def costly_warnings(costs: Sequence[Decimal | float | None],
                    unit: str) -> list[str | None]:
    """For each alternative of one answer, the warning when it costs more than
    ``COST_RATIO_LIMIT`` times the cheapest (``unit`` names the cost: "USD", "GPU-hours").
    Alternatives without a cost, and answers without a positive cheapest cost, get None."""
    # A Decimal is taken as it is; a float by its shortest text (what ``str`` prints).
    exact = [c if c is None or type(c) is Decimal else Decimal(str(c)) for c in costs]
    positive = [c for c in exact if c is not None and c > 0]
    if not positive:
        return [None] * len(costs)
    cheapest = min(positive)
    limit = cheapest * COST_RATIO_LIMIT
    out: list[str | None] = []
    for cost in exact:
        if cost is None or cost <= limit:
            out.append(None)
            continue
        ratio = cost / cheapest
        out.append(f"{COSTLY_PREFIX}: {ratio:,.1f}× the cheapest alternative in this answer "
                   f"({cheapest:,.0f} {unit}), over the {COST_RATIO_LIMIT}× limit")
    return out


# Coded warnings (issue 37): every string warning of an estimate, plan or quote line also
# appears as a ``WarningDetail`` with a stable code and the input or dimension it is about, so
# that clients need not match sentences. The codes:
DEFAULTED_INPUT = "defaulted_input"
"""An input the request left out was filled in by a default; ``field`` names it."""
OUTSIDE_VALIDATED_RANGE = "outside_validated_range"
"""The request lies outside the region the calibration was fitted on (``envelope``);
``field`` names the dimension."""
UNCALIBRATED_ACCELERATOR = "uncalibrated_accelerator"
IMPRACTICAL_WALL_CLOCK = "impractical_wall_clock"
IMPRACTICAL_COST = "impractical_cost"
DOES_NOT_FIT = "does_not_fit"
FITS_AT_EDGE = "fits_at_edge"
HIGH_MFU = "high_mfu"
UNEVEN_PIPELINE = "uneven_pipeline"
INTERLEAVING_MICRO_BATCHES = "interleaving_micro_batches"
TP_SPANS_NODES = "tp_spans_nodes"
SEQUENCE_PARALLEL_OFF = "sequence_parallel_off"
UNVALIDATED_SERVING = "unvalidated_serving"
NO_PROGRESS = "no_progress"
"""A plan whose job cannot make progress: checkpoints and restarts outpace the mean time
between failures (``failures``, issue 39)."""
NO_PROGRESS_PREFIX = "no progress"
"""The opening words of that warning's sentence."""
OTHER = "other"
"""A warning whose sentence matches none of the known openings (kept, never dropped)."""

WARNING_CODES = (DEFAULTED_INPUT, OUTSIDE_VALIDATED_RANGE, UNCALIBRATED_ACCELERATOR,
                 IMPRACTICAL_WALL_CLOCK, IMPRACTICAL_COST, DOES_NOT_FIT, FITS_AT_EDGE, HIGH_MFU,
                 UNEVEN_PIPELINE, INTERLEAVING_MICRO_BATCHES, TP_SPANS_NODES,
                 SEQUENCE_PARALLEL_OFF, UNVALIDATED_SERVING, NO_PROGRESS, OTHER)
"""Every code, in the order the OpenAPI document lists them."""


@dataclass(frozen=True, slots=True)
class WarningDetail:
    """One warning as data: ``code`` (one of ``WARNING_CODES``), ``field`` (the request field
    or model dimension it concerns, or None) and the human sentence."""

    code: str
    field: str | None
    message: str


_PREFIXES: tuple[tuple[str, str, str | None], ...] = (
    (LONG_RUN_PREFIX, IMPRACTICAL_WALL_CLOCK, None),
    (COSTLY_PREFIX, IMPRACTICAL_COST, None),
    ("does not fit:", DOES_NOT_FIT, "parallelism"),
    ("fits at the edge:", FITS_AT_EDGE, "parallelism"),
    ("vocab_size not given:", DEFAULTED_INPUT, "model.vocab_size"),
    ("predicted MFU", HIGH_MFU, None),
    ("interleaved pipelining usually needs", INTERLEAVING_MICRO_BATCHES, "parallelism.vp"),
    ("sequence parallelism is off", SEQUENCE_PARALLEL_OFF, "parallelism.sequence_parallel"),
    ("mixture-of-experts serving is not validated", UNVALIDATED_SERVING, "model"),
    (NO_PROGRESS_PREFIX + ":", NO_PROGRESS, "reliability"),
    ("time to first token at a request rate is not validated", UNVALIDATED_SERVING,
     "traffic"),
)


def detail_of(message: str) -> WarningDetail:
    """The coded form of a string warning, by its opening words (the sentences the core and
    the service write; an unknown sentence is ``other``)."""
    for prefix, code, field in _PREFIXES:
        if message.startswith(prefix):
            return WarningDetail(code, field, message)
    if " has no published training runs in the calibration set" in message:
        return WarningDetail(UNCALIBRATED_ACCELERATOR, "cluster.accelerator", message)
    if " layers do not divide evenly over " in message:
        return WarningDetail(UNEVEN_PIPELINE, "parallelism.pp", message)
    if message.startswith("tp (") and "spans more than one node" in message:
        return WarningDetail(TP_SPANS_NODES, "parallelism.tp", message)
    return WarningDetail(OTHER, None, message)


def details_of(messages: Sequence[str]) -> list[WarningDetail]:
    return [detail_of(m) for m in messages]


def outside_validated(details: Iterable[WarningDetail]) -> bool:
    """Whether an answer carries ``outside_validated_range``: the test a verdict uses before
    it rests on a serving estimate (``quote.job_flags``, a portfolio's fleets; issue 40)."""
    return any(d.code == OUTSIDE_VALIDATED_RANGE for d in details)
