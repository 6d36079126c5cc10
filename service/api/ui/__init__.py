"""``/ui``: server-rendered portal pages for planners and procurement, one module per page:

- ``train.py``: ``/ui``, the Train tab (estimate, optimise, quote, budget plan, largest model);
- ``serve.py``: ``/ui/serve``, the Serve tab (a serving estimate, or the quote of its fleet);
- ``quotes.py``: ``/ui/quotes/{id}``, a stored quote (and its verification);
- ``links.py``: the short-lived signed links to it that the page a quote is made on gives;
- ``whatif.py``: ``/ui/what-if``, a what-if sweep and its tornado chart (``tornado.py``);
- ``portfolios.py``: ``/ui/portfolios/{id}``, a stored commitment portfolio and its charts.

What they share (templates, form numbers, the in-process API client, drawing a page within its
deadline) is ``common.py``; the SVG charts are ``charts.py`` and ``latency_chart.py``. Each page
sends the JSON bodies a client would to this app's own API in process, so the figures, the
validation and the error messages are the API's. No script, no build step, no CDN: HTML, one
stylesheet from ``/static`` and inline SVG charts.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends

from service.api.ui import links, portfolios, quotes, serve, train, whatif

# Every page may link to a quote it made: the link is signed with this app's key (links.py).
router = APIRouter(include_in_schema=False, dependencies=[Depends(links.bind_signer)])
for page in (train, serve, quotes, whatif, portfolios):
    router.include_router(page.router)
