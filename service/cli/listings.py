"""``cq offers|models|accelerators``: the catalogue's offers, cheapest first, and the model
presets and accelerators that ``--model`` and ``--accelerator`` take."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

import typer

from service.api import presentation as fmt
from service.cli import tables as tb
from service.cli.client import DEFAULT_API_URL, Api, connect
from service.cli.common import (
    Accelerator,
    ApiKey,
    ApiUrl,
    AsJson,
    Local,
    _emit,
    _paged,
    _table,
    handled,
    out,
)


def _every_item(client: Api, path: str) -> list[dict[str, Any]]:
    """Every item of a paged list (models and accelerators are a few dozen)."""
    return _paged(client, path, {"page_size": 200})


def render_models(answer: dict[str, Any]) -> None:
    items = answer["items"]
    table = _table(f"Model presets: {len(items)}",
                     ["preset", tb.num("params"), tb.num("active"), tb.num("layers"),
                      tb.num("hidden"), tb.num("heads"), tb.num("experts")])
    for m in items:
        experts = (f"{m['experts_per_token']} of {m['num_experts']}" if m["num_experts"] > 1
                   else "—")
        table.add_row(m["name"], fmt.si(m["params_total"]), fmt.si(m["params_active"]),
                      f"{m['num_layers']:,}", f"{m['hidden_size']:,}", f"{m['num_heads']:,}",
                      experts)
    out.print(table)


def render_accelerators(answer: dict[str, Any]) -> None:
    items = answer["items"]
    table = _table(f"Accelerators: {len(items)}",
                     [tb.Col("id", max_width=22), tb.num("memory"), tb.num("HBM TB/s"),
                      tb.num("BF16 TFLOP/s"), tb.num("TDP W"), tb.num("NVLink"),
                      "calibrated"])
    for a in items:
        table.add_row(a["id"], f"{a['memory_gib']:,.0f} GiB", f"{a['hbm_tbytes_per_s']:,.2f}",
                      f"{a['bf16_tflops']:,.0f}" if a.get("bf16_tflops") else "—",
                      f"{a['tdp_w']:,.0f}", f"{a['scaleup_domain_size']:,}",
                      "yes" if a.get("calibrated") else "no")
    out.print(table)


OFFER_TERMS = ("on_demand", "spot")
"""The terms `cq offers` puts side by side when no --term is given."""
OFFER_PAGES = 50
"""At most 10,000 offers per term are read to pair and count (the seed has about 3,000)."""


def _every_offer(client: Api, params: dict[str, Any]) -> list[dict[str, Any]]:
    offers: list[dict[str, Any]] = []
    token: str | None = None
    for _ in range(OFFER_PAGES):
        page = client.call("GET", "/v1/offers",
                           params={**params, "page_size": 200, "page_token": token}).json()
        offers += page["items"]
        token = page.get("next_page_token")
        if not token:
            break
    return offers


def _offer_row_key(offer: dict[str, Any]) -> tuple[Any, ...]:
    return (offer["provider"], offer["region"], offer.get("zone") or "",
            offer["instance_type"], offer["accelerator"], offer["gpus_per_instance"],
            offer["currency"])


def render_offers(offers: list[dict[str, Any]], terms: list[str], limit: int) -> None:
    """One row per instance type and zone with each term's price per GPU-hour, sorted by the
    first term's (on-demand unless --term), rows without it after, by the next term's."""
    rows: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for offer in offers:
        rows.setdefault(_offer_row_key(offer), {}).setdefault(offer["term"], offer)

    def order(by_term: dict[str, dict[str, Any]]) -> tuple[Decimal, ...]:
        missing = Decimal("Infinity")
        return tuple(Decimal(by_term[t]["price_per_gpu_hour"]) if t in by_term else missing
                     for t in terms)

    ranked = sorted(rows.items(), key=lambda item: order(item[1]))
    currency = tb.common_currency([o for _, by_term in ranked for o in by_term.values()])
    accelerators = {key[4] for key in rows}
    sort_label = fmt.term_label(terms[0])
    title = (f"Offers: {tb.shown_of(min(limit, len(ranked)), len(ranked), 'instance types')}"
             f" ({len(offers):,} offers), cheapest {sort_label} price per GPU-hour first"
             + (f"; {next(iter(accelerators))}" if len(accelerators) == 1 else ""))
    columns: list[tb.Col | str] = [
        tb.Col("where", max_width=18), tb.Col("instance", max_width=26),
        *(["accelerator"] if len(accelerators) > 1 else []), tb.num("GPUs"),
        *[tb.num(f"{t.replace('_', '-')}{' ▲' if t == terms[0] else ''}\n"
                 f"{currency + '/' if currency else 'per '}GPU-h") for t in terms],
        tb.Col("as of", max_width=10), tb.Col("flags", max_width=6)]
    table = _table(title, columns)
    letters = tb.FlagLetters()
    for key, by_term in ranked[:limit]:
        provider, region, zone, instance, accelerator, per_instance, _ = key
        present = list(by_term.values())
        dates = sorted(o["as_of"] for o in present if o.get("as_of"))
        flags = [f for o in present for f in o.get("quality_flags") or []]
        table.add_row(" ".join(p for p in (provider, region, zone) if p), instance,
                      *([accelerator] if len(accelerators) > 1 else []), tb.gpus(per_instance),
                      *[tb.amount(by_term[t]["price_per_gpu_hour"], by_term[t]["currency"],
                                  currency) if t in by_term else "—" for t in terms],
                      dates[0] if dates else "undated", letters.cell(flags, unique=True))
    table.caption = letters.legend() or None
    table.caption_justify = "left"
    out.print(table)
    if len(ranked) > limit:
        out.print(f"{len(ranked) - limit:,} more; narrow the filters or raise --limit",
                  highlight=False)


def register(app: typer.Typer) -> None:
    @app.command()
    @handled
    def offers(
        accelerator: Accelerator = None,
        provider: Annotated[str | None, typer.Option(help="Provider id, e.g. aws.")] = None,
        region: Annotated[str | None, typer.Option(help="Region id.")] = None,
        term: Annotated[str | None, typer.Option(help="on_demand, spot, reserved_1y, ...")]
        = None,
        version: Annotated[str | None, typer.Option(help="Catalogue version (default "
                                                    "current).")] = None,
        limit: Annotated[int, typer.Option(help="Offers to show.", min=1, max=200)] = 20,
        api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None, local: Local = False,
        as_json: AsJson = False,
    ) -> None:
        """Price offers per GPU-hour, cheapest first: on-demand and spot side by side (or the
        --term given), one row per instance type and zone.

        --json prints the API's page of offers (the --limit cheapest, --term's or of every
        term)."""
        params = {"accelerator": accelerator, "provider": provider, "region": region,
                  "term": term, "version": version}
        with connect(api, api_key, local) as client:
            if as_json:
                answer = client.call("GET", "/v1/offers",
                                     params={**params, "page_size": limit}).json()
                _emit(answer, True, lambda _: None)
                return
            terms = [term] if term else list(OFFER_TERMS)
            found = [o for t in terms for o in _every_offer(client, {**params, "term": t})]
        render_offers(found, terms, limit)

    @app.command()
    @handled
    def models(api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None, local: Local = False,
               as_json: AsJson = False) -> None:
        """Model presets (--model takes their names): parameters, layers, width, experts."""
        with connect(api, api_key, local) as client:
            items = _every_item(client, "/v1/models")
        _emit({"items": items}, as_json, render_models)

    @app.command()
    @handled
    def accelerators(api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None,
                     local: Local = False, as_json: AsJson = False) -> None:
        """The hardware catalogue (--accelerator takes its ids): memory, bandwidth, peak
        BF16, power, NVLink domain, and whether the model is calibrated on it."""
        with connect(api, api_key, local) as client:
            items = _every_item(client, "/v1/accelerators")
        _emit({"items": items}, as_json, render_accelerators)
