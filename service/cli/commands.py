"""Every ``cq`` command but ``cq keys`` (``service/cli/__init__.py``), one module per group:

- ``estimate.py``: ``cq estimate``; ``whatif.py``: ``cq what-if``; ``plan.py``: ``cq optimise``;
- ``quote.py``: ``cq quote`` and ``cq quotes get|verify|requote|diff``;
- ``budget.py``: ``cq budget-plan``;
- ``serving.py``: ``cq serve-estimate|serve-quote|serve-plan``;
- ``listings.py``: ``cq offers|models|accelerators``;
- ``server.py``: ``cq serve``;
- ``catalog.py``: ``cq catalog versions|export|import|refresh``;
- ``calibrate.py``: ``cq calibrate create|get|list``;
- ``portfolio.py``: ``cq portfolio create``.

What they share (flags, the request body from flags, output, errors) is ``common.py``.
"""

from __future__ import annotations

import typer

from service.cli import (
    budget,
    calibrate,
    catalog,
    estimate,
    listings,
    plan,
    portfolio,
    quote,
    server,
    serving,
    whatif,
)


def register(app: typer.Typer) -> None:
    """Registers every group on ``app``. ``cq --help`` lists the commands in the order they are
    registered, then the groups (after ``keys``) in theirs: the calls keep both orders."""
    for group in (estimate, whatif, plan, quote, budget, serving, listings, server):
        group.register(app)
    catalog.register(app)
    quote.register_quotes(app)
    calibrate.register(app)
    portfolio.register(app)
