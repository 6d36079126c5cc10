"""Refresh prices from the providers' own public formats (issue 17, decision 70).

Each importer turns one public price document into rows of the offer import format
(``docs/catalog.md``); ``refresh_provider`` lands them as one new catalogue version through
the same all-or-nothing validation as ``POST /v1/catalog/imports``: the provider's offers in
the document's scope are replaced by the imported ones, everything else stays, and a diff
report says what was added, changed and removed, and which prices moved by more than a
threshold.

Scope (issue 39): a document replaces only what it covers, provider × regions × terms, where
the regions and the terms are those of the rows the importer made from it (a one-region AWS
offer file covers that region; a file of on-demand prices covers on-demand), narrowed by the
format (``Imported.terms``, ``instance_types``, ``payment_options``). Before, a one-region AWS
file removed the provider's offers in every other region (420 on the seed).

Formats (each documented by its publisher; the tests use small hand-made samples in exactly
these shapes, ``tests/data/importers/``):
- ``skypilot``: SkyPilot's catalog ``vms.csv`` (schema v5-v8: InstanceType, AcceleratorName,
  AcceleratorCount, vCPUs, MemoryGiB, Price, SpotPrice, Region, AvailabilityZone, ...), as
  in github.com/skypilot-org/skypilot-catalog;
- ``azure``: the Azure Retail Prices API answer (https://prices.azure.com/api/retail/prices,
  "Azure Retail Prices overview", Microsoft Learn): ``{"Items": [...], "NextPageLink": ...}``,
  items with ``armSkuName``, ``armRegionName``, ``retailPrice``, ``currencyCode``, ``type``
  (Consumption, Reservation), ``skuName`` (" Spot" / " Low Priority"), ``productName``
  (Windows excluded), ``unitOfMeasure`` and ``reservationTerm``; a reservation's price is the
  whole term's, divided here by the term's hours;
- ``gcp``: pages of the Cloud Billing Catalog API's Compute Engine SKUs
  (``services/6F81-5844-456A/skus``; "Get Google Cloud pricing information", Google Cloud
  documentation): ``skus`` with ``description``, ``category`` (resourceFamily, resourceGroup,
  usageType: OnDemand, Preemptible, Commit1Yr, Commit3Yr), ``serviceRegions`` and
  ``pricingInfo[0].pricingExpression.tieredRates[].unitPrice`` (units + nanos); GPU, core and
  RAM SKUs are priced separately and assembled per machine type;
- ``aws``: the AWS Price List bulk offer file for AmazonEC2 (JSON; "Price List file
  formats", AWS documentation): ``products`` (sku -> attributes: instanceType, regionCode,
  operatingSystem, tenancy, preInstalledSw, capacitystatus) and ``terms`` (OnDemand and
  Reserved, with priceDimensions in USD per ``Hrs``, an up-front ``Quantity`` fee, and
  termAttributes LeaseContractLength / PurchaseOption / OfferingClass); ``publicationDate``
  dates every row.

Which accelerator an instance type carries comes from the seed's sourced tables (the
SkyPilot rows' accelerator names, ``AZURE_ACCELERATORS``); an instance type whose
accelerator the catalogue has no datasheet for is skipped and counted, never guessed.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import cache
from typing import Any

from sqlalchemy.orm import Session

from service.catalog.offers import (
    MAX_PRICE_PER_HOUR,
    MAX_UPFRONT_FEE,
    ImportRejectedError,
    OfferContent,
    OfferRowError,
    parse_offers,
)
from service.catalog.prices import (
    accelerator_ids,
    check_row_text,
    commit_version,
    current_version_id,
    lock_catalog,
    revision_content,
    version_revisions,
)
from service.catalog.seed_facts import seed_rows
from service.catalog.seed_prices import (
    ACCELERATORS,
    AZURE_ACCELERATORS,
    SKIPPED_ACCELERATORS,
)
from service.core.units import HOURS_PER_YEAR

PROVIDERS = ("aws", "azure", "gcp", "lambda", "nebius", "skypilot")
DEFAULT_MOVE_THRESHOLD = Decimal("0.20")
"""A price that moves by more than 20 % in one refresh is listed for review (GPU list prices
moved 10-45 % in 2024-2025, seed/prices/README.md; larger single moves are usually a unit or
mapping error)."""


class ImporterError(ValueError):
    """The document is not in the importer's format (names what is wrong)."""


@dataclass(slots=True)
class Imported:
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    terms: frozenset[str] = frozenset()
    """The terms the format publishes: a refresh replaces the provider's offers of these
    terms and of the instance types the importer knows, and keeps the rest (AWS's offer file
    has no spot prices, so AWS spot offers stay; GCP's TPU slices stay)."""
    instance_types: frozenset[str] = frozenset()
    payment_options: frozenset[str | None] | None = None
    """With ``terms``, the payment options the format publishes (None: any). An AWS Savings
    Plans file replaces the Savings Plan rows and keeps the Reserved Instances of the same
    terms; an EC2 offer file does the reverse."""


@cache
def instance_accelerators(provider: str) -> dict[str, str]:
    """Instance type -> catalogue accelerator id, from the seed's sourced price rows."""
    if provider == "azure":
        return dict(AZURE_ACCELERATORS)
    files = {"aws": "gpu_prices_aws.csv", "gcp": "gpu_prices_gcp_instance_totals.csv",
             "lambda": "gpu_prices_lambda.csv", "nebius": "gpu_prices_nebius.csv"}
    if provider not in files:
        return {}
    table: dict[str, str] = {}
    for row in seed_rows(f"prices/{files[provider]}"):
        name = row["AcceleratorName"]
        if name in SKIPPED_ACCELERATORS or name not in ACCELERATORS[provider]:
            continue
        accelerator = ACCELERATORS[provider][name]
        if accelerator == "h100-sxm5-80gb" and "pcie" in row["InstanceType"]:
            accelerator = "h100-pcie-80gb"
        table[row["InstanceType"]] = accelerator
    return table


@cache
def instance_gpu_counts(provider: str) -> dict[str, str]:
    """Instance type -> GPUs per instance, from the seed's sourced price rows."""
    return {r["InstanceType"]: r["AcceleratorCount"]
            for r in seed_rows(f"prices/gpu_prices_{provider}.csv")}


def _decimal(text: Any, *, row: int, field_name: str, what: str,
             high: Decimal = MAX_PRICE_PER_HOUR) -> Decimal:
    """A price of the document, bounded before any arithmetic: 0 <= price <= ``high`` (the
    import's caps, ``MAX_PRICE_PER_HOUR`` per instance-hour unless said otherwise). Anything
    else rejects the refresh with a 422 naming the document's row and field (issue 36: a
    SkyPilot ``Price`` of 1e308 overflowed the 6-place rounding, dry run or not)."""
    try:
        value = Decimal(str(text))
    except (InvalidOperation, ValueError):
        value = Decimal("NaN")
    if not value.is_finite() or value < 0 or value > high:
        raise ImportRejectedError([OfferRowError(
            row, field_name, f"{what}: must be a finite price >= 0 and <= {high:f}",
            "out_of_range")])
    return value


def _text(value: Decimal) -> str:
    """Six places; ``value`` is a bounded price (``_decimal``) or made from bounded ones."""
    return f"{value.quantize(Decimal('0.000001')):f}"


# -- SkyPilot ---------------------------------------------------------------------------------

def from_skypilot_csv(text: str, *, provider: str, as_of: str, source: str) -> Imported:
    """SkyPilot ``vms.csv`` rows of one cloud (``provider``): on-demand and spot offers."""
    try:
        return _skypilot(text, provider, as_of, source)
    except csv.Error as exc:
        raise ImporterError(f"not CSV: {exc}") from None


def _skypilot(text: str, provider: str, as_of: str, source: str) -> Imported:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    needed = {"InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "SpotPrice",
              "Region"}
    missing = needed - set(reader.fieldnames or ())
    if missing:
        raise ImporterError(f"not a SkyPilot vms.csv: no column {sorted(missing)[0]}")
    known = instance_accelerators(provider)
    out = Imported(terms=frozenset({"on_demand", "spot"}), instance_types=frozenset(known))
    seen: set[tuple[str, str, str, str]] = set()
    for number, row in enumerate(reader, start=1):
        instance = row["InstanceType"]
        accelerator = known.get(instance)
        if accelerator is None:
            out.skipped["instance type without a catalogued accelerator"] += 1
            continue
        common = {"provider": provider, "region": row["Region"], "instance_type": instance,
                  "accelerator": accelerator, "gpus_per_instance": row["AcceleratorCount"],
                  "vcpus": row.get("vCPUs", ""), "memory_gib": row.get("MemoryGiB", ""),
                  "currency": "USD", "source": source, "as_of": as_of,
                  "indicative": "false", "notes": ""}
        if row["Price"]:
            key = (instance, row["Region"], "", "on_demand")
            if key not in seen:
                seen.add(key)
                out.rows.append({**common, "term": "on_demand", "price_per_hour": _text(
                    _decimal(row["Price"], row=number, field_name="Price", what=instance))})
        else:
            out.skipped["no on-demand price"] += 1
        spot = row.get("SpotPrice") or ""
        zone = row.get("AvailabilityZone") or ""
        spot_price = (_decimal(spot, row=number, field_name="SpotPrice", what=instance)
                      if spot else None)
        same = spot_price is not None and bool(row["Price"]) and spot_price == _decimal(
            row["Price"], row=number, field_name="Price", what=instance)
        if spot_price is not None and not same:
            key = (instance, row["Region"], zone, "spot")
            if key not in seen:
                seen.add(key)
                out.rows.append({**common, "term": "spot", "zone": zone,
                                 "price_per_hour": _text(spot_price)})
        elif spot:
            out.skipped["spot equal to on-demand (no spot price)"] += 1
    return out


# -- Azure Retail Prices API ------------------------------------------------------------------

AZURE_TERMS = {"1 Year": ("reserved_1y", 1), "3 Years": ("reserved_3y", 3)}


def from_azure_retail(pages: Iterable[Mapping[str, Any]], *, as_of: str,
                      source: str) -> Imported:
    """Linux VM prices of GPU instance types the catalogue knows, from one or more pages of
    the Retail Prices API: consumption (on-demand), spot, and 1- and 3-year reservations."""
    known = instance_accelerators("azure")
    gpus = instance_gpu_counts("azure")
    gpus.update({"Standard_ND96isr_H100_v5": "8", "Standard_ND96is_H100_v5": "8"})
    out = Imported(terms=frozenset({"on_demand", "spot", "reserved_1y", "reserved_3y"}),
                   instance_types=frozenset(known))
    number = 0
    for page in pages:
        if not isinstance(page, Mapping):
            raise ImporterError("not a Retail Prices API answer: a page is not an object")
        items = page.get("Items")
        if not isinstance(items, list):
            raise ImporterError("not a Retail Prices API answer: no Items list")
        for item in items:
            number += 1
            if not isinstance(item, Mapping):
                raise ImporterError("an Items entry is not an object")
            if item.get("serviceName") != "Virtual Machines":
                out.skipped["not a virtual machine"] += 1
                continue
            sku = str(item.get("armSkuName", ""))
            accelerator = known.get(sku)
            if accelerator is None:
                out.skipped["instance type without a catalogued accelerator"] += 1
                continue
            if "Windows" in str(item.get("productName", "")):
                out.skipped["Windows"] += 1
                continue
            if item.get("unitOfMeasure") not in ("1 Hour", "1 Hours"):
                out.skipped["unit is not one hour"] += 1
                continue
            kind, sku_name = item.get("type"), str(item.get("skuName", ""))
            term_years = (AZURE_TERMS[str(item["reservationTerm"])][1]
                          if kind == "Reservation" and item.get("reservationTerm") in AZURE_TERMS
                          else None)
            # A reservation's retailPrice is the whole term's: at most the hourly cap for
            # every hour of it.
            price = _decimal(item.get("retailPrice"), row=number, field_name="retailPrice",
                             what=sku, high=MAX_PRICE_PER_HOUR * (
                                 term_years * HOURS_PER_YEAR if term_years else 1))
            common = {"provider": "azure", "region": str(item.get("armRegionName", "")),
                      "instance_type": sku, "accelerator": accelerator,
                      "gpus_per_instance": gpus.get(sku, "1"),
                      "currency": str(item.get("currencyCode", "")), "source": source,
                      "as_of": as_of, "indicative": "false",
                      "notes": f"Azure meter {item.get('meterId', '')}; effective "
                               f"{str(item.get('effectiveStartDate', ''))[:10]}"}
            if kind == "Consumption" and "Low Priority" in sku_name:
                out.skipped["low priority (retired)"] += 1
            elif kind == "Consumption":
                term = "spot" if sku_name.endswith(" Spot") else "on_demand"
                out.rows.append({**common, "term": term, "price_per_hour": _text(price)})
            elif kind == "Reservation" and item.get("reservationTerm") in AZURE_TERMS:
                term, years = AZURE_TERMS[str(item["reservationTerm"])]
                hourly = price / (years * HOURS_PER_YEAR)
                out.rows.append({**common, "term": term, "payment_option": "all_upfront",
                                 "price_per_hour": _text(hourly),
                                 "notes": common["notes"] + f"; term price {price} / "
                                          f"{years * HOURS_PER_YEAR} h"})
            else:
                out.skipped[f"price type {kind}"] += 1
    return out


# -- AWS Price List bulk offer file ------------------------------------------------------------

AWS_PURCHASE = {"No Upfront": "no_upfront", "Partial Upfront": "partial_upfront",
                "All Upfront": "all_upfront"}
AWS_LEASE = {"1yr": ("reserved_1y", 1), "3yr": ("reserved_3y", 3)}


def from_aws_offer(document: Mapping[str, Any], *, source: str) -> Imported:
    """Linux, shared-tenancy, no-software EC2 prices of GPU instance types the catalogue
    knows: on-demand and standard Reserved Instances (hourly plus up-front fee)."""
    products, terms = document.get("products"), document.get("terms")
    if document.get("offerCode") != "AmazonEC2" or not isinstance(products, Mapping) \
            or not isinstance(terms, Mapping):
        raise ImporterError("not an AmazonEC2 bulk offer file (offerCode, products, terms)")
    as_of = str(document.get("publicationDate", ""))[:10] or "unknown"
    known = instance_accelerators("aws")
    gpus = instance_gpu_counts("aws")
    out = Imported(terms=frozenset({"on_demand", "reserved_1y", "reserved_3y"}),
                   instance_types=frozenset(known),
                   payment_options=frozenset({None, *AWS_PURCHASE.values()}))
    for number, (sku, product) in enumerate(products.items(), start=1):
        attributes = product.get("attributes", {}) if isinstance(product, Mapping) else {}
        instance = str(attributes.get("instanceType", ""))
        accelerator = known.get(instance)
        if accelerator is None:
            out.skipped["instance type without a catalogued accelerator"] += 1
            continue
        if (attributes.get("operatingSystem"), attributes.get("tenancy"),
                attributes.get("preInstalledSw"), attributes.get("capacitystatus")) != (
                "Linux", "Shared", "NA", "Used"):
            out.skipped["not Linux, shared, no software, used capacity"] += 1
            continue
        common = {"provider": "aws", "region": str(attributes.get("regionCode", "")),
                  "instance_type": instance, "accelerator": accelerator,
                  "gpus_per_instance": str(attributes.get("gpu") or gpus.get(instance, "")),
                  "currency": "USD", "source": source, "as_of": as_of, "indicative": "false",
                  "notes": f"AWS sku {sku}"}
        for offer in (terms.get("OnDemand", {}).get(sku) or {}).values():
            for dimension in offer.get("priceDimensions", {}).values():
                if dimension.get("unit") == "Hrs":
                    price = _decimal(dimension["pricePerUnit"].get("USD"), row=number,
                                     field_name="pricePerUnit.USD", what=f"sku {sku}")
                    if price > 0:
                        out.rows.append({**common, "term": "on_demand",
                                         "price_per_hour": _text(price)})
        for offer in (terms.get("Reserved", {}).get(sku) or {}).values():
            attrs = offer.get("termAttributes", {})
            if attrs.get("OfferingClass") != "standard" or attrs.get(
                    "LeaseContractLength") not in AWS_LEASE or attrs.get(
                    "PurchaseOption") not in AWS_PURCHASE:
                out.skipped["convertible or unknown reserved term"] += 1
                continue
            term, _ = AWS_LEASE[attrs["LeaseContractLength"]]
            hourly, upfront = Decimal(0), Decimal(0)
            for dimension in offer.get("priceDimensions", {}).values():
                value = _decimal(dimension["pricePerUnit"].get("USD"), row=number,
                                 field_name="pricePerUnit.USD", what=f"sku {sku}",
                                 high=MAX_UPFRONT_FEE if dimension.get("unit") == "Quantity"
                                 else MAX_PRICE_PER_HOUR)
                if dimension.get("unit") == "Hrs":
                    hourly = value
                elif dimension.get("unit") == "Quantity":
                    upfront = value
            out.rows.append({**common, "term": term,
                             "payment_option": AWS_PURCHASE[attrs["PurchaseOption"]],
                             "price_per_hour": _text(hourly), "upfront_fee": _text(upfront)})
    return out



# -- AWS Savings Plans price list file --------------------------------------------------------

AWS_SAVINGS_PLAN_PURCHASE = {"No Upfront": "savings_plan_no_upfront",
                             "All Upfront": "savings_plan_all_upfront"}
"""EC2 Instance Savings Plans the catalogue can price exactly. A Partial Upfront plan's split
between the up-front payment and the hourly rate is not in the price list, so it is counted
as skipped, not guessed."""
AWS_SAVINGS_PLAN_YEARS = {1: "reserved_1y", 3: "reserved_3y"}
AWS_LINUX_OPERATION = "RunInstances"
"""The EC2 operation of Linux/UNIX usage (AWS Price List: RunInstances:0002 is Windows)."""


def from_aws_savings_plans(document: Mapping[str, Any], *, source: str) -> Imported:
    """EC2 Instance Savings Plan rates for Linux, shared-tenancy usage of GPU instance types
    the catalogue knows, from an AWS Price List Savings Plans file (``products`` and
    ``terms.savingsPlan[].rates[]``; AWS Billing User Guide, "Reading the service price list
    file for a Savings Plan"). A rate is the plan's effective hourly price for the instance:
    No Upfront pays it every hour of the term, All Upfront pays rate x the term's hours
    before the term (``HOURS_PER_YEAR``). Compute Savings Plans are skipped: for one
    instance family in one region the EC2 Instance plan is the lower rate."""
    products = document.get("products")
    terms = document.get("terms")
    plans_terms = terms.get("savingsPlan") if isinstance(terms, Mapping) else None
    if not isinstance(products, list) or not isinstance(plans_terms, list):
        raise ImporterError("not an AWS Savings Plans price list file (products, "
                            "terms.savingsPlan)")
    as_of = str(document.get("publicationDate", ""))[:10] or "unknown"
    known = instance_accelerators("aws")
    gpus = instance_gpu_counts("aws")
    by_sku = {str(p.get("sku")): p for p in products if isinstance(p, Mapping)}
    out = Imported(terms=frozenset(AWS_SAVINGS_PLAN_YEARS.values()),
                   instance_types=frozenset(known),
                   payment_options=frozenset(AWS_SAVINGS_PLAN_PURCHASE.values()))
    for number, plan in enumerate(plans_terms, start=1):
        product = by_sku.get(str(plan.get("sku"))) if isinstance(plan, Mapping) else None
        if product is None:
            out.skipped["savings plan term without its product"] += 1
            continue
        if product.get("productFamily") != "EC2InstanceSavingsPlans":
            out.skipped["Compute Savings Plan (the EC2 Instance plan is the lower rate)"] += 1
            continue
        attributes = product.get("attributes", {})
        purchase = str(attributes.get("purchaseOption", ""))
        lease = plan.get("leaseContractLength", {})
        years = lease.get("duration") if lease.get("unit") == "year" else None
        if purchase not in AWS_SAVINGS_PLAN_PURCHASE:
            out.skipped["Partial Upfront (the up-front part is not in the price list)"] += 1
            continue
        if years not in AWS_SAVINGS_PLAN_YEARS:
            out.skipped["term other than 1 or 3 years"] += 1
            continue
        hours = HOURS_PER_YEAR * years
        for rate in plan.get("rates", []):
            usage = str(rate.get("discountedUsageType", ""))
            if rate.get("discountedOperation") != AWS_LINUX_OPERATION or (
                    "BoxUsage:" not in usage):
                out.skipped["not Linux shared-tenancy usage"] += 1
                continue
            instance = str(rate.get("discountedInstanceType") or usage.split("BoxUsage:")[1])
            accelerator = known.get(instance)
            if accelerator is None:
                out.skipped["instance type without a catalogued accelerator"] += 1
                continue
            money = rate.get("discountedRate", {})
            if money.get("currency") != "USD":
                out.skipped["rate not in USD"] += 1
                continue
            price = _decimal(money.get("price"), row=number, field_name="discountedRate.price",
                             what=instance)
            upfront = purchase == "All Upfront"
            out.rows.append({
                "provider": "aws", "instance_type": instance, "accelerator": accelerator,
                "region": str(rate.get("discountedRegionCode")
                              or attributes.get("regionCode") or document.get("regionCode")),
                "gpus_per_instance": gpus.get(instance, ""),
                "term": AWS_SAVINGS_PLAN_YEARS[years],
                "payment_option": AWS_SAVINGS_PLAN_PURCHASE[purchase],
                "price_per_hour": _text(Decimal(0) if upfront else price),
                "upfront_fee": _text(price * hours if upfront else Decimal(0)),
                "currency": "USD", "source": source, "as_of": as_of, "indicative": "false",
                "notes": f"EC2 Instance Savings Plan {plan.get('sku')}: {price} USD per hour "
                         f"effective, committed for {hours} h"
                         + (", paid before the term" if upfront else ", paid monthly")})
    return out


# -- GCP Cloud Billing Catalog ------------------------------------------------------------------

GCP_TERMS = {"OnDemand": "on_demand", "Preemptible": "spot", "Commit1Yr": "reserved_1y",
             "Commit3Yr": "reserved_3y"}
GCP_DWS = re.compile(r"\bDWS\b|Dynamic Workload Scheduler|flex[- ]start", re.IGNORECASE)
"""A Dynamic Workload Scheduler SKU's description (GCP lists them under usage type OnDemand)."""
GCP_GPU = re.compile(r"nvidia (?:tesla )?(a100 80gb|a100|h100 80gb mega|h100 80gb|h200 141gb|"
                     r"b200) gpu", re.IGNORECASE)
GCP_HOST = re.compile(r"\b(a2|a3|a4) (?:instance )?(core|cpu|ram)\b", re.IGNORECASE)
GCP_GPU_KEYS = {"A100": "a100", "A100-80GB": "a100 80gb", "H100": "h100 80gb",
                "H100-MEGA": "h100 80gb mega", "H200": "h200 141gb", "B200": "b200"}
"""The seed's accelerator names -> the GPU name in the SKU descriptions ("Nvidia Tesla A100
GPU", "Nvidia Tesla A100 80GB GPU", "Nvidia H100 80GB GPU", ...)."""
GCP_HOST_INCLUDED = frozenset({"a4"})
"""Families whose GPU SKU already includes the VM (the seed's a4 host rows are 0 on purpose,
seed/prices/README.md)."""


def _is_zero(value: Any) -> bool:
    try:
        return Decimal(str(value)) == 0
    except (InvalidOperation, ValueError):
        return False


def _sku_price(sku: Mapping[str, Any], number: int) -> Decimal:
    """The SKU's first-tier unit price, units + nanos / 10^9 (a Money message: nanos is
    -999,999,999 to +999,999,999), bounded by the hourly cap."""
    info = sku["pricingInfo"][0]["pricingExpression"]
    rate = next(r for r in info["tieredRates"] if _is_zero(r["startUsageAmount"]))
    price = rate["unitPrice"]
    if price.get("currencyCode", "USD") != "USD":
        raise ImporterError("only USD SKU prices are read (the catalogue's GCP currency)")
    nanos = price.get("nanos", 0)
    if isinstance(nanos, str) and nanos.isascii() and nanos.isdigit() and len(nanos) < 10:
        nanos = int(nanos)  # a proto3 JSON integer may be written as a string
    if isinstance(nanos, bool) or not isinstance(nanos, int) or not 0 <= nanos < 10**9:
        raise ImportRejectedError([OfferRowError(
            number, "unitPrice.nanos", "must be a whole number from 0 to 999999999",
            "out_of_range")])
    units = _decimal(price.get("units", "0"), row=number, field_name="unitPrice.units",
                     what=str(sku.get("skuId", "SKU")))
    return _decimal(units + Decimal(nanos) / 10**9, row=number, field_name="unitPrice",
                    what=str(sku.get("skuId", "SKU")))


def from_gcp_billing(pages: Iterable[Mapping[str, Any]], *, as_of: str,
                     source: str) -> Imported:
    """Accelerator-optimised machine prices assembled from Compute Engine SKUs: per region
    and usage type, vCPUs × core SKU + GiB × RAM SKU + GPUs × GPU SKU, for the machine types
    of the seed's table (their vCPU, memory and GPU counts). A part missing in a region or
    usage type means no offer there, never a guess."""
    parts: dict[tuple[str, str, str], Decimal] = {}
    accelerators = instance_accelerators("gcp")
    out = Imported(terms=frozenset(GCP_TERMS.values()), instance_types=frozenset(accelerators))
    number = 0
    for page in pages:
        if not isinstance(page, Mapping) or not isinstance(page.get("skus"), list):
            raise ImporterError("not a Cloud Billing Catalog answer: no skus list")
        for sku in page["skus"]:
            number += 1
            category = sku.get("category", {})
            term = GCP_TERMS.get(category.get("usageType", ""))
            if category.get("resourceFamily") != "Compute" or term is None:
                out.skipped["not a compute SKU of a priced usage type"] += 1
                continue
            description = str(sku.get("description", ""))
            if GCP_DWS.search(description):
                # Dynamic Workload Scheduler (flex-start, "DWS Defined Duration") SKUs are listed
                # under usage type OnDemand beside the on-demand ones at about 0.4x their price;
                # read as on-demand they priced 35 A3 rows of the seed at half (issue 39,
                # docs/data-quality.md). They are a different product: skipped, counted.
                out.skipped["a DWS (flex-start) SKU, not an on-demand price"] += 1
                continue
            gpu, host = GCP_GPU.search(description), GCP_HOST.search(description)
            if gpu:
                key = "gpu:" + gpu.group(1).lower()
            elif host:
                kind = "ram" if host.group(2).lower() == "ram" else "core"
                key = f"{host.group(1).lower()}:{kind}"
            else:
                out.skipped["not a GPU, or an A2/A3/A4 core or RAM SKU"] += 1
                continue
            price = _sku_price(sku, number)
            for region in sku.get("serviceRegions", []):
                parts[(str(region), term, key)] = price
    machines = {r["InstanceType"]: r for r in seed_rows(
        "prices/gpu_prices_gcp_instance_totals.csv")}
    for (region, term) in sorted({(r, t) for r, t, _ in parts}):
        for instance, m in sorted(machines.items()):
            family = instance.split("-")[0]
            gpu_rate = parts.get((region, term,
                                  "gpu:" + GCP_GPU_KEYS.get(m["AcceleratorName"], "")))
            core_rate = parts.get((region, term, f"{family}:core"))
            ram_rate = parts.get((region, term, f"{family}:ram"))
            if family in GCP_HOST_INCLUDED:
                core_rate, ram_rate = core_rate or Decimal(0), ram_rate or Decimal(0)
            if (gpu_rate is None or core_rate is None or ram_rate is None
                    or instance not in accelerators):
                continue
            total = (Decimal(m["vCPUs"]) * core_rate + Decimal(m["MemoryGiB"]) * ram_rate
                     + Decimal(m["AcceleratorCount"]) * gpu_rate)
            row = {"provider": "gcp", "region": region, "instance_type": instance,
                   "accelerator": accelerators[instance],
                   "gpus_per_instance": m["AcceleratorCount"], "vcpus": m["vCPUs"],
                   "memory_gib": m["MemoryGiB"], "currency": "USD", "term": term,
                   "price_per_hour": _text(total), "source": source, "as_of": as_of,
                   "indicative": "false",
                   "notes": f"{m['vCPUs']} vCPU x {core_rate} + {m['MemoryGiB']} GiB x "
                            f"{ram_rate} + {m['AcceleratorCount']} GPU x {gpu_rate} per hour"}
            if term.startswith("reserved"):
                row["payment_option"] = "no_upfront"
            out.rows.append(row)
    return out


# -- landing a refresh -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, kw_only=True)
class PriceMove:
    offer_id: str
    instance_type: str
    region: str
    term: str
    before: str
    after: str
    change_fraction: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Removal:
    offer_id: str
    instance_type: str
    region: str
    zone: str | None
    term: str
    payment_option: str | None
    price_per_hour: str
    """The removed offer's price (instance-hour, its currency)."""
    currency: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RefreshScope:
    """What a refresh replaces: the provider's offers in these regions and of these terms."""

    regions: list[str]
    terms: list[str]


MAX_REMOVALS_LISTED = 100
"""A refresh report lists at most this many removals (``removed`` counts them all): enough to
review a real change, while a mistaken document that removes thousands answers in kilobytes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RefreshReport:
    provider: str
    version_id: str | None
    """None for a dry run."""
    scope: RefreshScope
    added: int
    changed: int
    removed: int
    unchanged: int
    skipped: dict[str, int]
    moves_over_threshold: list[PriceMove]
    removals: list[Removal]
    """The first ``MAX_REMOVALS_LISTED`` removed offers, by region, instance type, term, zone
    and payment option."""
    threshold_fraction: str


def refresh_provider(session: Session, provider: str, imported: Imported, *, created_by: str,
                     note: str, threshold: Decimal = DEFAULT_MOVE_THRESHOLD,
                     dry_run: bool = False, observed_on: dt.date | None = None,
                     ) -> RefreshReport:
    """Replace ``provider``'s offers within the document's scope with ``imported``, as one new
    version (all or nothing; flushes only). The scope is the regions and terms of the imported
    rows (``RefreshScope``), within the format's terms, instance types and payment options;
    the provider's offers outside it stay unchanged. Derived reserved rows in scope go too:
    they were derived from the old prices."""
    if not imported.rows:
        raise ImporterError("the document holds no offer the catalogue can use")
    check_row_text(imported.rows)
    lock_catalog(session)
    # The refresh reads the prices today (UTC) unless the caller names the day the document
    # was read: each row's observed_at (issue 39), apart from its as_of.
    offers = parse_offers(imported.rows, accelerator_ids(session),
                          observed_on=observed_on or dt.datetime.now(dt.UTC).date())
    if any(o.provider != provider for o in offers):
        raise ImporterError(f"every imported offer must be {provider}'s")
    scope = RefreshScope(regions=sorted({o.region for o in offers}),
                         terms=sorted({o.term.value for o in offers}))
    current = current_version_id(session)
    old = [revision_content(r) for r in version_revisions(session, current)] if current else []
    before = {o.offer_id: o for o in old if _in_scope(o, provider, imported, scope)}
    after = {o.offer_id: o for o in offers}
    moves = _moves(before, after, threshold)
    changed = sum(1 for k, o in after.items()
                  if k in before and before[k].content_hash != o.content_hash)
    gone = sorted((before[k] for k in set(before) - set(after)), key=_removal_order)
    report = RefreshReport(
        provider=provider, version_id=None, scope=scope, added=len(set(after) - set(before)),
        changed=changed, removed=len(gone),
        unchanged=len(set(after) & set(before)) - changed, skipped=dict(imported.skipped),
        moves_over_threshold=moves, removals=[_removal(o) for o in gone[:MAX_REMOVALS_LISTED]],
        threshold_fraction=str(threshold))
    if dry_run:
        return report
    kept: Sequence[OfferContent] = [o for o in old
                                    if not _in_scope(o, provider, imported, scope)]
    version = commit_version(
        session, [*kept, *sorted(after.values(), key=lambda o: o.offer_id)],
        created_by=created_by, kind="refresh",
        note=note or f"refresh {provider}: +{report.added} ~{report.changed} "
                     f"-{report.removed}, {len(moves)} moves over {threshold:%}")
    return RefreshReport(**{**_fields(report), "version_id": version.id})


def _in_scope(offer: OfferContent, provider: str, imported: Imported,
              scope: RefreshScope) -> bool:
    """Whether a refresh from ``imported`` replaces ``offer``: the provider's, in a region and
    of a term the document has rows for, and of the format's terms, instance types and
    payment options (``Imported.terms``)."""
    payment = offer.payment_option.value if offer.payment_option else None
    return (offer.provider == provider and offer.term.value in imported.terms
            and offer.region in scope.regions and offer.term.value in scope.terms
            and offer.instance_type in imported.instance_types
            and (imported.payment_options is None or payment in imported.payment_options))


def _removal_order(offer: OfferContent) -> tuple[str, str, str, str, str]:
    return (offer.region, offer.instance_type, offer.term.value, offer.zone or "",
            offer.payment_option.value if offer.payment_option else "")


def _removal(offer: OfferContent) -> Removal:
    return Removal(offer_id=offer.offer_id, instance_type=offer.instance_type,
                   region=offer.region, zone=offer.zone, term=offer.term.value,
                   payment_option=offer.payment_option.value if offer.payment_option else None,
                   price_per_hour=_text(Decimal(offer.price_per_hour_micros) / 10**6),
                   currency=offer.currency)


def _fields(report: RefreshReport) -> dict[str, Any]:
    return {name: getattr(report, name) for name in report.__dataclass_fields__}


def _moves(before: Mapping[str, OfferContent], after: Mapping[str, OfferContent],
           threshold: Decimal) -> list[PriceMove]:
    moves: list[PriceMove] = []
    for key, new in sorted(after.items()):
        old = before.get(key)
        if old is None or old.price_per_hour_micros == 0:
            continue
        change = (Decimal(new.price_per_hour_micros) - old.price_per_hour_micros) / Decimal(
            old.price_per_hour_micros)
        if abs(change) > threshold:
            moves.append(PriceMove(
                offer_id=key, instance_type=new.instance_type, region=new.region,
                term=new.term.value, before=_text(Decimal(old.price_per_hour_micros) / 10**6),
                after=_text(Decimal(new.price_per_hour_micros) / 10**6),
                change_fraction=f"{change:.4f}"))
    return moves
