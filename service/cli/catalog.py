"""``cq catalog versions|export|import|refresh``: catalogue versions, and a provider's offers
replaced by its current public prices (a downloaded document, or fetched live)."""

from __future__ import annotations

import datetime as dt
import json
import sys
import urllib.parse
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from service.cli import tables as tb
from service.cli.client import DEFAULT_API_URL, CliError, _httpx, connect
from service.cli.common import ApiKey, ApiUrl, AsJson, Local, _emit, _table, err, handled, out


def register(app: typer.Typer) -> None:
    catalog_app = typer.Typer(help="Catalogue versions: list, export, import.",
                              no_args_is_help=True, rich_markup_mode=None)
    app.add_typer(catalog_app, name="catalog")

    @catalog_app.command("versions")
    @handled
    def versions(api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None, local: Local = False,
                 as_json: AsJson = False) -> None:
        """Catalogue versions, newest first."""
        with connect(api, api_key, local) as client:
            answer = client.call("GET", "/v1/catalog/versions",
                                 params={"page_size": 100}).json()

        def render(page: dict[str, Any]) -> None:
            table = _table(f"Catalogue versions: {len(page['items'])}"
                           + (" (the newest 100)" if page.get("next_page_token") else ""),
                           ["version", tb.Col("created (UTC)", max_width=10), "by", "kind",
                            tb.num("offers"), tb.Col("note", max_width=24)])
            for v in page["items"]:
                table.add_row(v["id"], v["created_at"][:16].replace("T", " "),
                              v["created_by"], v["kind"],
                              f"{v['offer_count']:,}" if v.get("offer_count") is not None
                              else "", v.get("note") or "")
            out.print(table)

        _emit(answer, as_json, render)

    @catalog_app.command("export")
    @handled
    def export(
        version: Annotated[str | None, typer.Option(help="Version id (default current).")]
        = None,
        export_format: Annotated[str, typer.Option("--format", help="csv or json.")] = "csv",
        output: Annotated[Path | None, typer.Option("--output", "-o", dir_okay=False,
                                                    help="File (default stdout).")] = None,
        api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None, local: Local = False,
    ) -> None:
        """Write a catalogue version as CSV or JSON (imports read it back byte for byte)."""
        with connect(api, api_key, local) as client:
            current = version or client.call("GET", "/v1/catalog/versions",
                                             params={"page_size": 1}).json()["items"][0]["id"]
            data = client.call("GET", f"/v1/catalog/versions/{current}/export",
                               params={"format": export_format}).content
        if output is None:
            sys.stdout.buffer.write(data)
        else:
            output.write_bytes(data)
            err.print(f"wrote {current} to {output} ({len(data):,} bytes)")

    @catalog_app.command("import")
    @handled
    def import_(
        file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True,
                                             help="A CSV or JSON file of offers.")],
        mode: Annotated[str, typer.Option(help="replace (the file is the catalogue) or patch "
                                          "(upsert these offers).")] = "patch",
        note: Annotated[str | None, typer.Option(help="Why; kept on the version.")] = None,
        api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None, local: Local = False,
        as_json: AsJson = False,
    ) -> None:
        """Import offers as a new catalogue version (all or nothing)."""
        media = "text/csv" if file.suffix.lower() == ".csv" else "application/json"
        with connect(api, api_key, local) as client:
            answer = client.call("POST", "/v1/catalog/imports", content=file.read_bytes(),
                                 params={"mode": mode, "note": note},
                                 headers={"Content-Type": media}).json()

        def render(v: dict[str, Any]) -> None:
            out.print(Text.assemble("created catalogue version ", (str(v["id"]), "bold"),
                                    f" ({v.get('offer_count', '?')} offers)"))

        _emit(answer, as_json, render)

    @catalog_app.command("refresh")
    @handled
    def refresh(
        provider: Annotated[str, typer.Option(help="aws, azure, gcp, or (with --format "
                                              "skypilot) the cloud of a SkyPilot vms.csv.")],
        from_file: Annotated[Path | None, typer.Option(
            "--from-file", exists=True, dir_okay=False, readable=True,
            help="A downloaded price document; without it, fetch live (azure: the Retail "
                 "Prices API; skypilot: the catalog's vms.csv on GitHub).")] = None,
        source_format: Annotated[str | None, typer.Option(
            "--format", help="aws, azure, gcp or skypilot (default: the provider's own).")]
        = None,
        as_of: Annotated[str | None, typer.Option(
            help="YYYY-MM-DD the prices held (default: the document's own date, or today "
                 "for a live fetch).")] = None,
        threshold: Annotated[str, typer.Option(help="Flag price moves over this fraction.")]
        = "0.20",
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Report only.")] = False,
        hold_on_moves: Annotated[bool, typer.Option(
            "--hold-on-moves", help="Store nothing, and exit 4, when a price moves by more "
                                    "than the threshold or an offer would be removed: a "
                                    "person reviews it first.")] = False,
        observed_at: Annotated[str | None, typer.Option(
            "--observed-at", help="YYYY-MM-DD the document was read from its source "
                                  "(default: today; pass the download day of an older "
                                  "--from-file).")] = None,
        source_url: Annotated[str | None, typer.Option(
            "--source-url", help="https:// address the --from-file came from, recorded on "
                                 "every refreshed offer (a live fetch records its own, "
                                 "commit-pinned for SkyPilot).")] = None,
        api: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = None, local: Local = False,
        as_json: AsJson = False,
    ) -> None:
        """Replace one provider's offers with its current public prices, as one new catalogue
        version, and print the diff: added, changed, removed, and price moves to review."""
        kind = source_format or provider
        if kind not in ("aws", "azure", "gcp", "skypilot"):
            raise typer.BadParameter("use --format skypilot for this provider's SkyPilot "
                                     "catalog, or aws/azure/gcp", param_hint="--provider")
        if from_file is not None:
            body = from_file.read_bytes()
        else:
            body, source_url = fetch_live(kind, provider)
            as_of = as_of or dt.date.today().isoformat()
        params: dict[str, Any] = {"format": kind, "threshold": threshold,
                                  "dry_run": str(dry_run).lower()}
        if observed_at:
            params["observed_at"] = observed_at
        if source_url:
            params["source_url"] = source_url
        if kind == "skypilot":
            params["provider"] = provider
        if as_of:
            params["as_of"] = as_of
        media = "text/csv" if kind == "skypilot" else "application/json"
        held = False
        with connect(api, api_key, local) as client:
            if hold_on_moves and not dry_run:
                answer = client.call("POST", "/v1/catalog/refreshes", content=body,
                                     params={**params, "dry_run": "true"},
                                     headers={"Content-Type": media}).json()
                held = bool(answer["moves_over_threshold"]) or answer["removed"] > 0
            if not held:
                answer = client.call("POST", "/v1/catalog/refreshes", content=body,
                                     params=params, headers={"Content-Type": media}).json()

        def render(r: dict[str, Any]) -> None:
            if held:
                why = " and ".join(
                    ([] if not r["moves_over_threshold"] else
                     ["prices moved over the threshold"])
                    + ([] if not r["removed"] else
                       [f"{r['removed']} offer{'s' if r['removed'] != 1 else ''} would be "
                        "removed"]))
                out.print(Text.assemble(("held", "bold"), f": {why}; nothing stored"))
            where = (Text.assemble("catalogue version ", (str(r["version_id"]), "bold"))
                     if r["version_id"] else Text("dry run, nothing stored"))
            out.print(Text.assemble(
                f"{r['provider']}: ", where, f": +{r['added']} added, ~{r['changed']} "
                f"changed, -{r['removed']} removed, {r['unchanged']} unchanged"))
            for reason, count in sorted(r["skipped"].items()):
                out.print(f"  skipped {count}: {reason}")
            # At 80 columns an offer id (28 characters) and four more text columns leave no
            # room for the prices: the id and its instance share a cell, as do where and the
            # term, so the prices are never cut (issue 41).
            if r["moves_over_threshold"]:
                table = _table(f"Price moves over {r['threshold_fraction']}",
                               [OFFER_COL, WHERE_COL, tb.num("before"), tb.num("after"),
                                tb.num("change")])
                for m in r["moves_over_threshold"]:
                    table.add_row(_offer_cell(m), _where_cell(m), m["before"], m["after"],
                                  f"{float(m['change_fraction']):+.1%}")
                out.print(table)
            if r.get("removals"):
                table = _table(f"Removed: {r['removed']}"
                               + (f" (the first {len(r['removals'])})"
                                  if len(r["removals"]) < r["removed"] else ""),
                               [OFFER_COL, WHERE_COL, tb.num("price")])
                for m in r["removals"]:
                    table.add_row(_offer_cell(m), _where_cell(m), m["price_per_hour"])
                out.print(table)

        _emit(answer, as_json, render)
        if held:
            raise typer.Exit(4)


OFFER_COL = tb.Col("offer\ninstance", max_width=28)
WHERE_COL = tb.Col("region zone\nterm", max_width=24)


def _offer_cell(move: dict[str, Any]) -> str:
    return f"{move['offer_id']}\n{move['instance_type']}"


def _where_cell(move: dict[str, Any]) -> str:
    where = " ".join(x for x in (move["region"], move.get("zone")) if x)
    return f"{where}\n{move['term']}"


LIVE_SOURCES = {
    "skypilot": "https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/{ref}/"
                "catalogs/v8/{provider}/vms.csv",
    "azure": "https://prices.azure.com/api/retail/prices",
}
SKYPILOT_LATEST_COMMIT = ("https://api.github.com/repos/skypilot-org/skypilot-catalog/commits"
                          "?path=catalogs/v8/{provider}/vms.csv&per_page=1")
"""The newest commit that changed a cloud's vms.csv: a live SkyPilot refresh reads the file at
that commit, so the source it records names exactly what was read (issue 41)."""
AZURE_FILTER = ("serviceName eq 'Virtual Machines' and priceType ne 'DevTestConsumption' and "
                "(startswith(armSkuName, 'Standard_ND') or startswith(armSkuName, "
                "'Standard_NC'))")
MAX_LIVE_PAGES = 200
AZURE_HOST = "prices.azure.com"
"""The only host a live Azure refresh talks to: its NextPageLink and any redirect must stay
on https://prices.azure.com (issue 36: a NextPageLink was followed to any host)."""


def fetch_live(kind: str, provider: str) -> tuple[bytes, str]:
    """The provider's current public document (network permitting), and the address it was
    read from. AWS's regional offer files are hundreds of megabytes: download one and pass
    --from-file."""
    if kind == "gcp":
        raise typer.BadParameter(
            "the Cloud Billing Catalog API needs your API key: save the Compute Engine SKUs "
            "(https://cloudbilling.googleapis.com/v1/services/6F81-5844-456A/skus?key=KEY, "
            "every page, as a JSON array) and pass --from-file", param_hint="--from-file")
    if kind == "aws":
        raise typer.BadParameter(
            "download the region's offer file (https://pricing.us-east-1.amazonaws.com/offers/"
            "v1.0/aws/AmazonEC2/current/<region>/index.json), or its Savings Plans file "
            "(https://pricing.us-east-1.amazonaws.com/savingsPlan/v1.0/aws/"
            "AWSComputeSavingsPlan/current/region_index.json lists each region's), and pass "
            "--from-file",
            param_hint="--from-file")
    httpx = _httpx()
    try:
        return _fetch(httpx, kind, provider)
    except httpx.HTTPError as exc:
        raise CliError(f"could not fetch {kind} prices live ({exc}); download the document "
                       "and pass --from-file") from None


def _pinned_to_azure(url: str) -> None:
    """Refuse a URL that is not https://prices.azure.com (default port, no credentials)."""
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if (parts.scheme != "https" or parts.hostname != AZURE_HOST or port not in (None, 443)
            or parts.username is not None or parts.password is not None):
        where = f"{parts.scheme}://{parts.hostname or ''}"[:100]
        raise CliError(
            f"the Azure Retail Prices API sent the refresh to {where!r}; a live Azure refresh "
            f"only follows pages on https://{AZURE_HOST}, so nothing was fetched from there "
            "and nothing was stored")


def _fetch(httpx: Any, kind: str, provider: str, transport: Any = None) -> tuple[bytes, str]:
    hooks = ({"request": [lambda request: _pinned_to_azure(str(request.url))]}
             if kind == "azure" else {})
    with httpx.Client(timeout=60, follow_redirects=True, event_hooks=hooks,
                      transport=transport) as web:
        if kind == "skypilot":
            ref = _skypilot_commit(httpx, web, provider)
            pinned = LIVE_SOURCES["skypilot"].format(ref=ref, provider=provider)
            answer = web.get(pinned)
            answer.raise_for_status()
            content: bytes = answer.content
            return content, pinned
        pages: list[Any] = []
        url: str | None = LIVE_SOURCES["azure"]
        params: dict[str, str] | None = {"$filter": AZURE_FILTER}
        while url and len(pages) < MAX_LIVE_PAGES:
            answer = web.get(url, params=params)
            answer.raise_for_status()
            page = answer.json()
            pages.append(page)
            url, params = page.get("NextPageLink"), None
            if url:
                if not isinstance(url, str):
                    raise CliError("the Azure Retail Prices API answered a NextPageLink that "
                                   f"is not a URL on https://{AZURE_HOST}; nothing was stored")
                _pinned_to_azure(url)
        return json.dumps(pages).encode(), LIVE_SOURCES["azure"]


def _skypilot_commit(httpx: Any, web: Any, provider: str) -> str:
    """The newest commit of the cloud's vms.csv (a 40-hex sha), or ``master`` when GitHub's
    API does not say (rate limit, no network to it): the source then records ``master``."""
    try:
        answer = web.get(SKYPILOT_LATEST_COMMIT.format(provider=provider),
                         headers={"Accept": "application/vnd.github+json"})
        sha = answer.json()[0]["sha"] if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError, LookupError, TypeError):
        sha = None
    if isinstance(sha, str) and len(sha) == 40 and all(c in "0123456789abcdef" for c in sha):
        return sha
    return "master"
