"""The seed price catalogue: offers built from verbatim copies of the research price files in
``service/catalog/seed/prices`` (``seed/prices/README.md`` gives their sources and problems).

What is left out, and why, is listed in ``SKIPPED_ACCELERATORS`` and ``docs/catalog.md``:
rows whose accelerator has no datasheet row in the catalogue, and rows with no price at all.
Real GCP committed-use offers come from ``gcp_committed_use_prices.csv``; every other
on-demand offer gets indicative reserved offers derived by ``RESERVED_DISCOUNTS`` (a source
starting ``derived:``, so quotes flag them ``derived_price``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from decimal import ROUND_HALF_EVEN, Decimal
from functools import cache
from typing import Any

from service.catalog.offers import (
    OfferContent,
    PaymentOption,
    Term,
    micros_to_text,
    parse_offers,
)
from service.catalog.seed_facts import seed_rows

SKYPILOT_AS_OF = "unknown"
"""The SkyPilot snapshot carries no fetch date (its content is from late 2025 or later), so
its rows say ``unknown`` and quotes flag them ``undated_price`` (issue 17: never a stand-in
date; decision 67). An import from the provider's own price list dates them."""
SKYPILOT_NOTE = "snapshot date unknown (late 2025 to 2026); re-pull before relying on it"

SNAPSHOT_DAY = "2026-11-22"
"""The day the team's research price snapshot (``shared/data/``) was copied into the seed
(commit 4849496, ``seed/prices/README.md``)."""
LATER_COPY_DAY = "2026-11-24"
"""The day the files added to the seed later were copied from ``shared/data/`` (commits
0e07df6, d357af8 and eb9e865; ``seed/prices/README.md``)."""
OBSERVED_AT: dict[str, str] = {
    "gpu_prices_aws.csv": SNAPSHOT_DAY, "gpu_prices_gcp_instance_totals.csv": SNAPSHOT_DAY,
    "gpu_prices_lambda.csv": SNAPSHOT_DAY, "gpu_prices_nebius.csv": SNAPSHOT_DAY,
    "gpu_prices_azure_indicative.csv": SNAPSHOT_DAY,
    "committed_and_reserved_prices.csv": SNAPSHOT_DAY,
    "gpu_prices_azure.csv": LATER_COPY_DAY, "tpu_prices_gcp.csv": LATER_COPY_DAY,
    "gcp_committed_use_prices.csv": LATER_COPY_DAY,
}
"""Each price file's ``observed_at``: the day the team read it, its copy day (source:
``seed/prices/README.md``'s table and the commits that added the files). It is not the day
the provider published the price (``as_of``, unknown for the SkyPilot rows): a price read
on this day may be older, which is why the built-in policy only warns on such a price
(``price_date_unknown_observed``) and fails it after ``max_observed_age_days`` (issue 39).
Derived reserved rows keep their on-demand row's day."""

RESERVED_DISCOUNTS: dict[Term, tuple[Decimal, str]] = {
    Term.RESERVED_1Y: (Decimal("0.45"), "a 1-year reservation saves about 45% against "
                       "on-demand (the A100 figure in issue 3; AWS's p4d 1-year no-upfront "
                       "Reserved Instance is about 41-45% below on-demand)"),
    Term.RESERVED_3Y: (Decimal("0.60"), "a 3-year reservation is assumed to save 60% "
                       "(hyperscaler 3-year commitments are typically 55-65% below on-demand; "
                       "no primary per-SKU rate was reachable)"),
}
"""Indicative reserved rate = on-demand × (1 − discount), no up-front fee (docs/catalog.md)."""

ACCELERATORS: dict[str, dict[str, str]] = {
    "aws": {"L40S": "l40s-48gb", "L4": "l4-24gb", "V100": "v100-sxm2-32gb",
            "V100-32GB": "v100-sxm2-32gb", "A100": "a100-sxm4-40gb",
            "A100-80GB": "a100-sxm4-80gb", "H100": "h100-sxm5-80gb", "H200": "h200-sxm-141gb",
            "B200": "b200-sxm-180gb"},
    "gcp": {"A100": "a100-sxm4-40gb", "A100-80GB": "a100-sxm4-80gb", "H100": "h100-sxm5-80gb",
            "H100-MEGA": "h100-sxm5-80gb", "H200": "h200-sxm-141gb", "B200": "b200-sxm-180gb"},
    "lambda": {"V100": "v100-sxm2-32gb", "A100": "a100-sxm4-40gb",
               "A100-80GB": "a100-sxm4-80gb", "H100": "h100-sxm5-80gb",
               "B200": "b200-sxm-180gb"},
    "nebius": {"L40S": "l40s-48gb", "H100": "h100-sxm5-80gb", "H200": "h200-sxm-141gb",
               "B200": "b200-sxm-180gb"},
    "azure": {"H100": "h100-sxm5-80gb", "H100 NVL": "h100-nvl-94gb"},
}
"""Source accelerator names -> catalogue ids. The PCIe H100 is told apart by instance name."""
SKIPPED_ACCELERATORS = {"B300", "A6000", "RTX6000", "A10", "GH200", "Trainium"}
"""No datasheet row in the catalogue, so no estimate could use these offers."""

SOURCES = {
    "aws": "SkyPilot catalog v8 aws/vms.csv (commit 00148f2af367); AWS EC2 public price list "
           "(on-demand) and EC2 spot price history (per zone)",
    "gcp": "SkyPilot catalog v8 gcp/vms.csv (commit 006059e0f18a), host VM + accelerator SKUs "
           "summed per region; GCP Cloud Billing Catalog",
    "lambda": "SkyPilot catalog v8 lambda/vms.csv (commit 0f4070387edc); Lambda Cloud price "
              "table",
    "nebius": "SkyPilot catalog v8 nebius/vms.csv (commit 0082b0435f39); Nebius price table",
}


def _rows(name: str) -> list[dict[str, str]]:
    return seed_rows(f"prices/{name}")


def _mib_to_gib(text: str) -> str:
    return repr(float(text) / 1024) if text else ""


def _skypilot_rows() -> Iterator[dict[str, Any]]:
    files = {"aws": "gpu_prices_aws.csv", "gcp": "gpu_prices_gcp_instance_totals.csv",
             "lambda": "gpu_prices_lambda.csv", "nebius": "gpu_prices_nebius.csv"}
    for provider, filename in files.items():
        seen_on_demand: set[tuple[str, str]] = set()
        for row in _rows(filename):
            name = row["AcceleratorName"]
            if name in SKIPPED_ACCELERATORS:
                continue
            accelerator = ACCELERATORS[provider][name]
            if accelerator == "h100-sxm5-80gb" and "pcie" in row["InstanceType"]:
                accelerator = "h100-pcie-80gb"
            notes = SKYPILOT_NOTE
            if name == "H100-MEGA":
                notes += "; a3-megagpu: H100 with the faster GPUDirect-TCPXO network"
            parts = row.get("AcceleratorPrice"), row.get("AcceleratorSpotPrice")
            if parts[0] and parts[1] and Decimal(parts[1]) > Decimal(parts[0]):
                notes += (f"; source problem: the accelerator SKU's spot price {parts[1]} is "
                          f"above its on-demand {parts[0]} (masked in this host+GPU total)")
            common = {
                "provider": provider, "region": row["Region"],
                "instance_type": row["InstanceType"], "accelerator": accelerator,
                "gpus_per_instance": row["AcceleratorCount"], "vcpus": row["vCPUs"],
                "memory_gib": row["MemoryGiB"], "gpu_memory_gib": _mib_to_gib(row["GpuMemoryMiB"]),
                "currency": "USD", "source": SOURCES[provider],
                "as_of": SKYPILOT_AS_OF, "indicative": "false", "notes": notes,
                "observed_at": OBSERVED_AT[filename],
            }
            key = (row["InstanceType"], row["Region"])
            if row["Price"] and key not in seen_on_demand:
                seen_on_demand.add(key)
                yield {**common, "term": "on_demand", "price_per_hour": row["Price"]}
            if row.get("SpotPrice"):
                yield {**common, "term": "spot", "price_per_hour": row["SpotPrice"],
                       "zone": row.get("AvailabilityZone", "")}


AZURE_FILE = "gpu_prices_azure.csv"
"""Azure GPU VMs from SkyPilot's v6/v5 Azure catalogs (Azure Retail Prices API, US regions;
``seed/prices/README.md``). Their commit dates are unknown, so every row's ``as_of`` is
``unknown`` (issue 17: never a stand-in date) and the date evidence is in its notes."""
AZURE_INDICATIVE_FILE = "gpu_prices_azure_indicative.csv"
AZURE_ACCELERATORS: dict[str, str] = {
    "Standard_ND96isr_H100_v5": "h100-sxm5-80gb", "Standard_ND96is_H100_v5": "h100-sxm5-80gb",
    "Standard_NC40ads_H100_v5": "h100-nvl-94gb", "Standard_NC80adis_H100_v5": "h100-nvl-94gb",
    "Standard_ND96amsr_A100_v4": "a100-sxm4-80gb", "Standard_ND96asr_v4": "a100-sxm4-40gb",
    "Standard_ND40rs_v2": "v100-sxm2-32gb",
}
"""Azure VM types whose GPU has a datasheet row. Left out (no row in the catalogue): K80, M60,
T4, A10 (and its fractional NVadsA10 sizes), Radeon MI25 and PRO V620, the PCIe V100 16 GB
of NCv3, the PCIe A100 80 GB of NC A100 v4 and the confidential NCC H100 v5, whose source
row names no accelerator. Microsoft Learn's size pages give the GPU of each."""
AZURE_GPU_COUNT_FIX = {"Standard_ND96isr_H100_v5": 8, "Standard_ND96is_H100_v5": 8}
"""The source says 12; ND H100 v5 VMs have 8 H100 (Microsoft Learn, ND-H100-v5 sizes)."""


def _azure_rows() -> Iterator[dict[str, Any]]:
    """Real Azure list prices. Spot equal to on-demand is no spot price (the source recorded
    no discount), so no spot offer is made from it; the indicative third-party figures are
    kept only where no real row covers the same VM, region and term."""
    covered: set[tuple[str, str, str]] = set()
    for row in _rows(AZURE_FILE):
        accelerator = AZURE_ACCELERATORS.get(row["InstanceType"])
        if accelerator is None or not row["Price"]:
            continue
        notes = [f"as_of unknown: {row['as_of']}", row["notes"]]
        count = row["AcceleratorCount"]
        if row["InstanceType"] in AZURE_GPU_COUNT_FIX:
            count = str(AZURE_GPU_COUNT_FIX[row["InstanceType"]])
            notes.append(f"GPU count {row['AcceleratorCount']} in the source corrected to "
                         f"{count}")
        spot_is_price = row["SpotPrice"] == row["Price"]
        if spot_is_price:
            notes.append("no spot offer: the source's spot price equals on-demand")
        common = {
            "provider": "azure", "region": row["Region"], "instance_type": row["InstanceType"],
            "accelerator": accelerator, "gpus_per_instance": count, "vcpus": row["vCPUs"],
            "memory_gib": row["MemoryGiB"], "currency": "USD",
            "source": f"{row['source']}; Azure Retail Prices API (Linux consumption and "
                      "spot meters)",
            "as_of": "unknown", "indicative": "false",
            "notes": "; ".join(n for n in notes if n)[:4000],
            "observed_at": OBSERVED_AT[AZURE_FILE],
        }
        covered.add((row["InstanceType"].removeprefix("Standard_"), row["Region"], "on_demand"))
        yield {**common, "term": "on_demand", "price_per_hour": row["Price"]}
        if row["SpotPrice"] and not spot_is_price:
            covered.add((row["InstanceType"].removeprefix("Standard_"), row["Region"], "spot"))
            yield {**common, "term": "spot", "price_per_hour": row["SpotPrice"]}
    for row in _rows(AZURE_INDICATIVE_FILE):
        price = row["Price"] or row["SpotPrice"]
        if not price or (row["InstanceType"], row["Region"], row["Term"]) in covered:
            continue  # no price in any reachable source, or a real list price exists
        stated = row["AsOf"]  # "2026-06" or "2026": a period, not a date
        exact = len(stated) == 10
        yield {
            "provider": "azure", "region": row["Region"], "instance_type": row["InstanceType"],
            "accelerator": ACCELERATORS["azure"][row["AcceleratorName"]],
            "gpus_per_instance": row["AcceleratorCount"], "gpu_memory_gib": row["GpuMemoryGiB"],
            "term": row["Term"], "currency": "USD", "price_per_hour": price,
            "source": row["Source"], "as_of": stated if exact else "unknown",
            "indicative": "true",
            "notes": row["Notes"] + ("" if exact else f"; as_of unknown: the source dates it only "
                                                     f"as {stated}"),
            "observed_at": OBSERVED_AT[AZURE_INDICATIVE_FILE],
        }


CAPACITY_BLOCK_FILE = "committed_and_reserved_prices.csv"


def _capacity_block_rows() -> Iterator[dict[str, Any]]:
    accelerators = {"H100": "h100-sxm5-80gb", "H200": "h200-sxm-141gb", "A100": "a100-sxm4-40gb"}
    source = ""
    for row in _rows(CAPACITY_BLOCK_FILE):
        source = row["source"] if row["source"] != "same as above" else source
        if row["accelerator"] in SKIPPED_ACCELERATORS:
            continue
        yield {
            "provider": "aws", "region": row["region"], "instance_type": row["instance_type"],
            "accelerator": accelerators[row["accelerator"]],
            "gpus_per_instance": row["accelerator_count"], "term": "capacity_block",
            "payment_option": "all_upfront", "currency": "USD",
            "price_per_hour": row["effective_instance_hourly_usd"], "source": source,
            "as_of": "2024-12-31", "indicative": "false",
            "notes": "effective hourly rate of a 1-182 day block, paid up front; prices valid "
                     "until 2025-01-01; OS fee extra. " + row["notes"],
            "observed_at": OBSERVED_AT[CAPACITY_BLOCK_FILE],
        }


def _reserved_rows(on_demand: OfferContent) -> Iterator[dict[str, Any]]:
    for term, (discount, basis) in RESERVED_DISCOUNTS.items():
        micros = (Decimal(on_demand.price_per_hour_micros) * (1 - discount)).to_integral_value(
            ROUND_HALF_EVEN
        )
        row = {k: v for k, v in on_demand.canonical().items() if v != ""}
        row.update({
            "term": term.value, "payment_option": PaymentOption.NO_UPFRONT.value,
            "price_per_hour": micros_to_text(int(micros)), "indicative": "true",
            "source": f"derived: on-demand x (1 - {discount}); {basis}. On-demand from "
                      f"{on_demand.source}",
        })
        yield row


CARBON_FILE = "region_carbon_intensity.csv"
"""Grid carbon intensity per provider region (``seed/prices/README.md``): GCP from Google's
own yearly figures, AWS and Azure from Cloud Carbon Footprint's location-based factors."""


def _year(text: str) -> int:
    """The year a row's ``year`` column starts with (``"2020 (eGRID2020)"`` -> 2020); 0 when
    it names none (``"unspecified"``)."""
    return int(text[:4]) if text[:4].isdigit() else 0


@cache
def region_carbon() -> dict[tuple[str, str], tuple[str, str]]:
    """(provider, region) -> (gCO2e per kWh, source with the figure's year), the newest year
    where a region has several (GCP publishes 2024 and 2025)."""
    newest: dict[tuple[str, str], dict[str, str]] = {}
    for row in _rows(CARBON_FILE):
        key = (row["provider"].lower(), row["region"])
        if key not in newest or _year(row["year"]) > _year(newest[key]["year"]):
            newest[key] = row
    return {key: (row["gco2e_per_kwh"],
                  f"{row['source']}; grid year {row['year']}; as of {row['as_of']}")
            for key, row in newest.items()}


def _with_carbon(row: Mapping[str, Any]) -> Mapping[str, Any]:
    """The row with its region's grid carbon intensity, where the table has the region."""
    found = region_carbon().get((row["provider"], row.get("region") or ""))
    if found is None:
        return row
    return {**row, "region_carbon_g_per_kwh": found[0], "region_carbon_source": found[1]}


TPU_FILE = "tpu_prices_gcp.csv"
"""GCP Cloud TPU prices per chip-hour, from the same SkyPilot snapshot as the GPU rows."""
TPU_SLICE_NAME = {"tpu-v4": ("v4-{}", 2), "tpu-v5p": ("v5p-{}", 2),
                  "tpu-v5e": ("v5litepod-{}", 1), "tpu-v6e": ("v6e-{}", 1)}
"""Slice names: v4 and v5p count TensorCores (2 per chip), v5e and v6e count chips (Google
Cloud TPU docs, "TPU types and topologies"; seed/prices/README.md)."""


TPU_DCN_GBITS_PER_S_PER_CHIP = {
    "tpu-v5p": (50, "Cloud TPU v5p docs: 'Data center network (DCN) bandwidth per chip (Gbps) "
                    "| 50'"),
    "tpu-v5e": (25, "Cloud TPU v5e docs: 'Per-host NIC configuration | 2 x 100 Gbps NIC', 8 "
                    "chips per host ('Data center network bandwidth per Pod | 6.4 Tbps' = 256 x "
                    "25)"),
}
"""Data-centre network between slices (Multislice), per chip, where Google documents it.
v4 and v6e have no documented figure, so their slices have no inter-slice network and a job
larger than one slice has no v4 or v6e line (the hardware catalogue's DCN figure for them is
an assumption, fine for an estimate, not for a procurement line)."""


def _tpu_slices(smallest: int, pod: int) -> list[int]:
    """Slice sizes in chips: powers of two from the smallest slice the price file names to
    the largest that fits the pod, and the whole pod."""
    sizes = []
    chips = smallest
    while chips <= pod:
        sizes.append(chips)
        chips *= 2
    return sizes if sizes[-1] == pod else [*sizes, pod]


def _tpu_dcn(accelerator: str, chips: int, datasheet: str) -> dict[str, str]:
    """A slice's fabric columns: ICI inside, and the slice's DCN (chips x per-chip) between
    slices where documented (``TPU_DCN_GBITS_PER_S_PER_CHIP``)."""
    ici = f"{datasheet}: one slice's chips share the ICI torus"
    if accelerator not in TPU_DCN_GBITS_PER_S_PER_CHIP:
        return {"fabric_source": ici + "; no documented DCN, so one slice per job"}
    per_chip, source = TPU_DCN_GBITS_PER_S_PER_CHIP[accelerator]
    return {"inter_node_gbps": str(per_chip * chips),
            "fabric_source": f"{ici}; Multislice over the data-centre network, {per_chip} "
                             f"Gbit/s per chip x {chips} chips ({source})"}


def _tpu_rows(pods: Mapping[str, tuple[int, str]]) -> Iterator[dict[str, Any]]:
    """One offer per TPU slice shape, region and term (on-demand, spot): the slice is the
    instance, its chips the "GPUs" and its ICI the fast domain. Per-chip prices are flat
    across slice sizes in the source (checked smallest against largest), so a slice costs
    chips x the per-chip price. Multislice jobs (DCN between slices) are offered where
    Google documents the DCN bandwidth (v5p, v5e: ``_tpu_dcn``). ``pods``: accelerator id ->
    (chips, datasheet)."""
    seen: set[tuple[str, str, str]] = set()
    for row in _rows(TPU_FILE):
        accelerator = row["tpu_version"]
        if accelerator not in pods or accelerator not in TPU_SLICE_NAME:
            continue
        pod, datasheet = pods[accelerator]
        name, cores_per_chip = TPU_SLICE_NAME[accelerator]
        for term, column in (("on_demand", "price_per_chip_hour_usd"),
                             ("spot", "spot_price_per_chip_hour_usd")):
            per_chip = row[column].strip()
            key = (accelerator, row["region"], term)
            if not per_chip or key in seen:
                continue  # v6e placeholders (no price); duplicate zones of one region
            seen.add(key)
            for chips in _tpu_slices(int(row["basis_slice_chips"]), pod):
                yield {
                    "provider": "gcp", "region": row["region"],
                    "instance_type": name.format(chips * cores_per_chip),
                    "accelerator": accelerator, "gpus_per_instance": str(chips),
                    "nvlink_domain": str(chips),
                    **_tpu_dcn(accelerator, chips, datasheet),
                    "term": term, "currency": "USD",
                    "price_per_hour": str(Decimal(per_chip) * chips),
                    "source": row["source"] + " (per-chip price x chips in the slice)",
                    "as_of": SKYPILOT_AS_OF, "indicative": "false",
                    "notes": f"{SKYPILOT_NOTE}; {row['notes']}",
                    "observed_at": OBSERVED_AT[TPU_FILE],
                }


CUD_FILE = "gcp_committed_use_prices.csv"
"""GCP committed-use (CUD) prices from the Cloud Billing Catalog (``seed/prices/README.md``)."""
CUD_ACCELERATORS = {"A100 40GB": "a100-sxm4-40gb", "H100 80GB": "h100-sxm5-80gb",
                    "H100 80GB Mega": "h100-sxm5-80gb"}
CUD_TERMS = {Term.RESERVED_1Y: "cud_1y_usd_per_hour", Term.RESERVED_3Y: "cud_3y_usd_per_hour"}


def _cud_rows(offered: set[tuple[str, str]]) -> Iterator[dict[str, Any]]:
    """Real 1- and 3-year committed-use rows for the (machine type, region) pairs the seed
    offers on demand (the CUD file lists every region with SKUs for all parts, which does
    not prove the machine is offered there). Their prices include the local SSD that GCP
    attaches to a3 machines, so they are a little above host + GPUs of the on-demand rows."""
    for row in _rows(CUD_FILE):
        if (row["machine_type"], row["region"]) not in offered:
            continue
        ssd = ("; includes the 6,000 GB local SSD bundled with a3 machines"
               if row["machine_type"].startswith("a3") else "")
        for term, column in CUD_TERMS.items():
            yield {
                "provider": "gcp", "region": row["region"],
                "instance_type": row["machine_type"],
                "accelerator": CUD_ACCELERATORS[row["accelerator"]],
                "gpus_per_instance": row["accelerator_count"], "term": term.value,
                "payment_option": PaymentOption.NO_UPFRONT.value, "currency": "USD",
                "price_per_hour": row[column], "source": row["source"],
                "as_of": row["as_of"], "indicative": "false",
                "notes": "GCP committed-use discount, billed monthly for the term" + ssd
                         + ". " + row["notes"],
                "observed_at": OBSERVED_AT[CUD_FILE],
            }


@cache
def seed_offers(accelerator_ids: frozenset[str]) -> tuple[OfferContent, ...]:
    """Every seed offer, validated like an import; each carries its region's grid carbon
    intensity where ``region_carbon_intensity.csv`` has the region (issue 17)."""
    pods = {r["id"]: (int(r["scaleup_domain_size"]), r["source"].split(" (")[0])
            for r in seed_rows("accelerators.csv")
            if r["id"] in accelerator_ids and r["id"].startswith("tpu-")}
    rows: list[Mapping[str, Any]] = [
        _with_carbon(r) for r in (*_skypilot_rows(), *_azure_rows(), *_capacity_block_rows(),
                                  *_tpu_rows(pods))]
    offers = parse_offers(rows, set(accelerator_ids))
    on_demand = [o for o in offers if o.term is Term.ON_DEMAND]
    gcp = {(o.instance_type, o.region) for o in on_demand if o.provider == "gcp"}
    real = parse_offers([_with_carbon(r) for r in _cud_rows(gcp)], set(accelerator_ids))
    covered = {(o.provider, o.instance_type, o.region, o.term) for o in real}
    # Synthetic reserved rows only where no real committed price exists (issue 17); they
    # keep their "derived:" source, so quotes flag them derived_price.
    derived = [r for o in on_demand for r in _reserved_rows(o)
               if (o.provider, o.instance_type, o.region, r["term"]) not in covered]
    return (*offers, *real, *parse_offers(derived, set(accelerator_ids)))

