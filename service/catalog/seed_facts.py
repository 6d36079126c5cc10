"""Sourced facts that fill what a price import leaves out: each instance type's interconnect
(``seed/instance_fabric.csv``) and spot interruption rates (``seed/spot_interruption_rates.csv``).
Both files name their source per row; ``seed/instance_fabric.md`` and
``seed/spot_interruption_rates.md`` explain them. Read from the package, never from outside.
"""

from __future__ import annotations

import csv
from functools import cache
from importlib import resources


def seed_rows(name: str) -> list[dict[str, str]]:
    """The rows of ``service/catalog/seed/<name>``, a CSV file shipped in the package."""
    path = resources.files("service.catalog").joinpath(f"seed/{name}")
    return list(csv.DictReader(path.read_text("utf-8").splitlines()))


@cache
def _fabric() -> dict[tuple[str, str], tuple[int | None, float | None, str]]:
    table: dict[tuple[str, str], tuple[int | None, float | None, str]] = {}
    for row in seed_rows("instance_fabric.csv"):
        domain = row["nvlink_domain"].strip()
        gbps = row["inter_node_gbps"].strip()
        if not domain and not gbps:
            continue
        source = f"{row['source'].strip()} (as of {row['as_of'].strip() or 'unknown'})"
        table[(row["provider"].strip(), row["instance_type"].strip())] = (
            int(float(domain)) if domain else None, float(gbps) if gbps else None, source)
    return table


Fabric = tuple[int | None, float | None, str]


def instance_fabric(provider: str, instance_type: str) -> Fabric | None:
    """(NVLink domain, inter-node Gbit/s, source) of a known instance type, else None."""
    return _fabric().get((provider, instance_type))


PROTOCOL_OF_FABRIC = {
    "nvlink-efa": "efa", "pcie-efa": "efa",
    "nvlink-infiniband": "infiniband", "pcie-infiniband": "infiniband",
    "nvlink-tcpx": "tcpx", "nvlink-tcpxo": "tcpx",
    "nvlink-rdma-roce": "roce",
    "nvlink-ethernet": "ethernet_tcp", "pcie-ethernet": "ethernet_tcp",
}
"""The ``cluster.fabric`` protocol (``specs.FabricProtocol``) of each ``fabric`` kind of
``seed/instance_fabric.csv``, as the provider documents the instance's GPU back-end network
(``seed/instance_fabric.md``; docs/catalog.md, "Protocol per offer"): AWS EFA, Azure
InfiniBand, Google GPUDirect-TCPX and its NIC-offloaded TCPXO (timed as TCPX: the model has
one TCP-with-GPU-memory protocol), Google's RDMA over Converged Ethernet (A3 Ultra, A4), and
plain Ethernet, which NCCL reaches through its socket transport (``ethernet_tcp``)."""


@cache
def _protocols() -> dict[tuple[str, str], str]:
    return {(row["provider"].strip(), row["instance_type"].strip()):
            PROTOCOL_OF_FABRIC[row["fabric"].strip()]
            for row in seed_rows("instance_fabric.csv")
            if row["fabric"].strip() in PROTOCOL_OF_FABRIC}


def instance_protocol(provider: str, instance_type: str) -> str | None:
    """The fabric protocol of a known instance type's GPU back-end network (a
    ``specs.FabricProtocol`` value), else None (the kind of fabric is not documented)."""
    return _protocols().get((provider, instance_type))


ASSUMED_PREFIX = "assumed: "
"""Interruption-rate sources that are assumptions start with this (and legacy ``default:``)."""


@cache
def _interruption_rates() -> dict[tuple[str, str, str], tuple[float, str]]:
    table: dict[tuple[str, str, str], tuple[float, str]] = {}
    for row in seed_rows("spot_interruption_rates.csv"):
        rate = row["interruption_rate_per_instance_hour"].strip()
        if not rate:
            continue
        assumed = row["assumed"].strip().lower() == "true"
        text = f"{row['basis'].strip()} [{row['source'].strip()}]"
        table[(row["provider"].strip(), row["instance_family"].strip(),
               row["region"].strip())] = (float(rate), (ASSUMED_PREFIX if assumed else "") + text)
    return table


def default_interruption_rate(provider: str, instance_type: str,
                              region: str = "*") -> tuple[float, str]:
    """The most specific sourced rate (family and region, family, region, provider, then the
    labelled fallback for providers with no public figure)."""
    family = instance_type.split(".")[0]
    table = _interruption_rates()
    for key in ((provider, family, region), (provider, family, "*"), (provider, "*", region),
                (provider, "*", "*"), ("*", "*", "*")):
        if key in table:
            return table[key]
    raise LookupError("spot_interruption_rates.csv has no '*' fallback row")


def is_assumed(source: str | None) -> bool:
    return source is None or source.startswith((ASSUMED_PREFIX, "default:"))
