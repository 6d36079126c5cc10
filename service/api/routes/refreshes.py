"""Refresh a provider's prices from its own public price format (``catalog/importers.py``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from decimal import Decimal
from typing import Annotated, Any, Literal

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, Field
from typing_extensions import TypeAliasType

from service.api.auth import Principal, require
from service.api.deps import SessionDep, commit_before_answer
from service.api.problems import problem_responses
from service.api.schemas.common import NoteText, TextRule
from service.catalog import importers
from service.catalog.offers import ImportRejectedError
from service.core.errors import InvalidSpecError

router = APIRouter(tags=["catalog"])

CatalogWrite = Annotated[Principal, require("catalog:write")]
RefreshFormat = TypeAliasType("RefreshFormat", Literal["skypilot", "azure", "aws", "gcp"])
Format = RefreshFormat
SKYPILOT_CLOUDS = ("aws", "gcp", "lambda", "nebius", "azure")
SourceUrl = Annotated[str, TextRule(max_length=500)]
"""Where the refreshed document came from (an https:// URL, a commit-pinned one where the
source is versioned): appended to every refreshed offer's ``source`` (issue 41)."""


class PriceMoveOut(BaseModel):
    offer_id: str
    instance_type: str
    region: str
    term: str
    before: str
    after: str
    change_fraction: str


class RemovalOut(BaseModel):
    offer_id: str
    instance_type: str
    region: str
    zone: str | None
    term: str
    payment_option: str | None
    price_per_hour: str = Field(description="The removed offer's list price per instance-hour "
                                            "(decimal string, in currency).")
    currency: str


class RefreshScopeOut(BaseModel):
    """What the refresh replaces: the provider's offers in these regions and of these terms
    (those the document has rows for), of the instance types and payment options the format
    publishes. The provider's offers outside it are kept unchanged."""

    regions: list[str] = Field(description="Regions the document has at least one row for.")
    terms: list[str] = Field(description="Terms the document has at least one row for.")


class RefreshOut(BaseModel):
    """What a refresh did (or, with dry_run, would do) to the provider's offers."""

    provider: str
    version_id: str | None = Field(description="The new catalogue version; null on a dry run.")
    scope: RefreshScopeOut
    added: int
    changed: int
    removed: int = Field(description="Offers in the scope that the document no longer has; "
                                     "all of them are counted, the first "
                                     f"{importers.MAX_REMOVALS_LISTED} are in removals.")
    unchanged: int
    skipped: dict[str, int] = Field(description="Rows of the document not turned into offers, "
                                                "by reason.")
    moves_over_threshold: list[PriceMoveOut] = Field(
        description="Offers whose price moved by more than threshold_fraction: review them.")
    removals: list[RemovalOut] = Field(
        max_length=importers.MAX_REMOVALS_LISTED,
        description="The removed offers (ordered by region, instance type, term, zone and "
                    f"payment option; at most {importers.MAX_REMOVALS_LISTED}, removed counts "
                    "all): review them. cq catalog refresh --hold-on-moves holds a refresh "
                    "that removes any offer, as it holds price moves.")
    threshold_fraction: str


BODY_OPENAPI: dict[str, Any] = {"requestBody": {
    "required": True,
    "description": "The provider's document as published: SkyPilot vms.csv (text/csv), one "
                   "Azure Retail Prices API answer or a JSON array of its pages "
                   "(application/json), one Cloud Billing Catalog SKU list answer or an array "
                   "of its pages (application/json), or an AWS Price List bulk offer file "
                   "for AmazonEC2 or an AWS Price List Savings Plans file (its EC2 "
                   "Instance Savings Plan rates replace only the AWS Savings Plan offers) "
                   "(application/json).",
    "content": {"text/csv": {"schema": {"type": "string"}},
                "application/json": {"schema": {"type": "object"}}}}}


@router.post("/v1/catalog/refreshes", summary="Refresh a provider's prices from its own format",
             status_code=201, response_model=RefreshOut, openapi_extra=BODY_OPENAPI,
             responses={200: {"description": "A dry run: nothing was stored.",
                              "model": RefreshOut},
                        **problem_responses(400, 401, 403, 409, 413, 415, 422)})
async def refresh_catalog(
    request: Request, response: Response, session: SessionDep, principal: CatalogWrite,
    source_format: Annotated[Format, Query(alias="format",
                                           description="The document's format.")],
    provider: Annotated[str | None, Query(
        pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$",
        description="For skypilot: the cloud the vms.csv is of (aws, gcp, lambda, nebius, "
                    "azure). Otherwise the format's own provider.")] = None,
    as_of: Annotated[dt.date | None, Query(
        description="The date the prices held (the fetch date). Default: the document's own "
                    "date (AWS publicationDate), else unknown (never a stand-in).")] = None,
    threshold: Annotated[Decimal, Query(
        gt=0, le=10, description="List prices that move by more than this fraction.")]
    = importers.DEFAULT_MOVE_THRESHOLD,
    dry_run: Annotated[bool, Query(description="Report only; store nothing.")] = False,
    note: Annotated[NoteText, Query(description="Stored on the new version; no control "
                                                "characters.")] = "",
    observed_at: Annotated[dt.date | None, Query(
        description="The day the document was read from its source (each refreshed offer's "
                    "observed_at; the price policy's age rule counts from it). Default: today "
                    "(UTC); pass the download day for an older file. Not after today.")]
    = None,
    source_url: Annotated[SourceUrl | None, Query(
        pattern=r"^https://\S+$",
        description="Where the document was fetched from (https://; pin the commit where the "
                    "source is versioned, e.g. a raw.githubusercontent.com URL at a commit). "
                    "Appended to every refreshed offer's source.")] = None,
) -> RefreshOut:
    """Replace the provider's offers in the document's scope (the regions and terms it has
    rows for) with those in the document, as one new catalogue version (all or nothing, like
    an import); the provider's offers outside the scope and every other provider's stay. The
    answer gives the scope, what was added, changed and removed (with the removed offers), and
    the price moves over ``threshold``."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    wanted = "text/csv" if source_format == "skypilot" else "application/json"
    if media != wanted:
        raise HTTPException(415, f"send a {source_format} document as {wanted}")
    if source_format == "skypilot" and provider not in SKYPILOT_CLOUDS:
        raise InvalidSpecError(f"provider must be one of {', '.join(SKYPILOT_CLOUDS)} for a "
                               "SkyPilot vms.csv", field="provider")
    if source_format != "skypilot" and provider not in (None, source_format):
        raise InvalidSpecError(f"a {source_format} document holds {source_format}'s prices",
                               field="provider")
    today = dt.datetime.now(dt.UTC).date()
    if observed_at is not None and observed_at > today:
        raise InvalidSpecError(f"must not be after today ({today.isoformat()}, UTC): it is the "
                               "day the document was read", field="observed_at")
    body = await request.body()
    day = as_of.isoformat() if as_of else "unknown"

    def parse() -> importers.Imported:
        try:
            text = body.decode("utf-8-sig")
            if source_format == "skypilot":
                return importers.from_skypilot_csv(
                    text, provider=str(provider), as_of=day,
                    source=f"SkyPilot catalog vms.csv ({provider}), refreshed by "
                           f"{principal.name}")
            document = json.loads(text)
            if source_format == "azure":
                pages = document if isinstance(document, list) else [document]
                return importers.from_azure_retail(
                    pages, as_of=day, source="Azure Retail Prices API (prices.azure.com)")
            if source_format == "gcp":
                pages = document if isinstance(document, list) else [document]
                return importers.from_gcp_billing(
                    pages, as_of=day, source="GCP Cloud Billing Catalog API, Compute Engine "
                                             "SKUs (cloudbilling.googleapis.com)")
            if not isinstance(document, dict):
                raise importers.ImporterError("an AWS offer file is a JSON object")
            if isinstance(document.get("terms"), dict) and "savingsPlan" in document["terms"]:
                imported = importers.from_aws_savings_plans(
                    document, source="AWS Price List Savings Plans file (EC2 Instance Savings "
                                     "Plans)")
            else:
                imported = importers.from_aws_offer(
                    document, source="AWS Price List bulk offer file (AmazonEC2)")
            if as_of:
                for row in imported.rows:
                    row["as_of"] = day
            return imported
        except UnicodeDecodeError:
            raise HTTPException(400, "the body is not UTF-8 text") from None
        except ImportRejectedError:
            raise  # a row's field is out of bounds: 422 naming the row and field
        except (ValueError, RecursionError, AttributeError, TypeError, KeyError) as exc:
            # The importers walk untrusted nested JSON: a value of the wrong shape anywhere
            # means the document is not in the format.
            raise InvalidSpecError(f"not a {source_format} document: {str(exc)[:300]}",
                                   field="body") from None

    imported = await run_in_threadpool(parse)
    if source_url is not None:
        for row in imported.rows:
            row["source"] = f"{row['source']}; fetched from {source_url}"[:2000]
    target = str(provider) if source_format == "skypilot" else source_format

    def work() -> RefreshOut:
        try:
            report = importers.refresh_provider(
                session, target, imported, created_by=principal.name, note=note,
                threshold=threshold, dry_run=dry_run, observed_on=observed_at or today)
        except importers.ImporterError as exc:
            raise InvalidSpecError(str(exc), field="body") from None
        answer = RefreshOut.model_validate(dataclasses.asdict(report))
        if not dry_run:
            commit_before_answer(session)
        return answer

    answer = await run_in_threadpool(work)
    if dry_run:
        response.status_code = 200
    else:
        response.headers["Location"] = f"/v1/catalog/versions/{answer.version_id}"
    return answer
