"""Each offer carries its fabric protocol where the provider documents it, and its quote lines are
timed on it when the request states no ``cluster.fabric`` (issue 42, "Catalogue")."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from service.api.quoting import Plan, fabric_timing
from service.catalog.mapping import fabric_protocol
from service.catalog.offers import OfferContent, with_sourced_facts
from service.catalog.seed_facts import PROTOCOL_OF_FABRIC, instance_protocol, seed_rows
from service.core.quote import Fabric, Term
from service.core.specs import EnergySpec, FabricProtocol, FabricSpec, ParallelismPlan
from tests.factories import accelerator, model, training


@pytest.mark.parametrize(("provider", "instance_type", "protocol"), [
    ("aws", "p4d.24xlarge", "efa"), ("aws", "p5.48xlarge", "efa"),
    ("aws", "p6-b200.48xlarge", "efa"),
    ("gcp", "a3-highgpu-8g", "tcpx"), ("gcp", "a3-megagpu-8g", "tcpx"),
    ("gcp", "a3-ultragpu-8g", "roce"),
    ("azure", "Standard_ND96isr_H100_v5", "infiniband"),
    ("azure", "Standard_ND96asr_v4", "infiniband"),
    ("nebius", "gpu-h100-sxm_8gpu-128vcpu-1600gb", "infiniband"),
    ("lambda", "gpu_8x_h100_sxm5", "ethernet_tcp"),
])
def test_the_documented_protocol_of_each_family(provider: str, instance_type: str,
                                                protocol: str) -> None:
    assert instance_protocol(provider, instance_type) == protocol
    assert fabric_protocol(protocol) == FabricProtocol(protocol)


def test_every_fabric_kind_of_the_seed_is_a_protocol_or_unknown() -> None:
    kinds = {row["fabric"].strip() for row in seed_rows("instance_fabric.csv")}
    assert kinds - set(PROTOCOL_OF_FABRIC) == {""}  # empty: the kind is not documented
    assert {FabricProtocol(p) for p in PROTOCOL_OF_FABRIC.values()} <= set(FabricProtocol)
    assert fabric_protocol("200 Gb/s InfiniBand HDR") is None  # an import's free text
    assert fabric_protocol(None) is None


def _offer(instance_type: str, interconnect: str | None) -> OfferContent:
    return OfferContent(
        provider="aws", region="us-east-1", zone=None, instance_type=instance_type,
        accelerator="h100-sxm5-80gb", gpus_per_instance=8, vcpus=None, memory_gib=None,
        gpu_memory_gib=None, interconnect=interconnect, nvlink_domain=None,
        inter_node_gbps=None, fabric_source=None, term=Term.ON_DEMAND, payment_option=None,
        currency="USD", price_per_hour_micros=1, upfront_fee_micros=0,
        interruption_rate_per_hour=None, interruption_rate_source=None,
        region_carbon_g_per_kwh=None, region_carbon_source=None, source="test",
        as_of=dt.date(2026, 1, 1), indicative=False, notes="")


def test_the_seed_fills_the_interconnect_and_keeps_a_stated_one() -> None:
    assert with_sourced_facts(_offer("p5.48xlarge", None)).interconnect == "efa"
    assert with_sourced_facts(_offer("p5.48xlarge", "stated")).interconnect == "stated"
    assert with_sourced_facts(_offer("no-such-type", None)).interconnect is None


def _plan(fabric: FabricSpec | None = None) -> Plan:
    return Plan(model=model("llama3.1-70b"), training=training(global_batch_seqs=512),
                plan=ParallelismPlan(tp=8, pp=4, dp=32), accelerator=accelerator(),
                energy=EnergySpec(), fabric=fabric)


def test_lines_are_timed_on_the_offers_protocol_unless_the_request_states_one() -> None:
    network = Fabric(gpus_per_instance=8, nvlink_domain=8, inter_node_gbps=800.0)

    def wall_s(plan: Plan, protocol: FabricProtocol | None) -> float:
        timed = fabric_timing(plan, 1024, dataclasses.replace(network, protocol=protocol))
        assert timed is not None
        return timed.wall_s

    plain = wall_s(_plan(), None)
    # InfiniBand is the fitted network: the same figure; EFA and TCPX are slower (their
    # bandwidth fractions and latencies, fabric.PROTOCOL_DEFAULTS), plain Ethernet more so.
    assert wall_s(_plan(), FabricProtocol.INFINIBAND) == plain
    efa = wall_s(_plan(), FabricProtocol.EFA)
    tcpx = wall_s(_plan(), FabricProtocol.TCPX)
    sockets = wall_s(_plan(), FabricProtocol.ETHERNET_TCP)
    assert plain < efa < tcpx < sockets
    timed = fabric_timing(_plan(), 1024, dataclasses.replace(network,
                                                             protocol=FabricProtocol.EFA))
    assert timed is not None
    assert "efa (the offer's interconnect)" in timed.basis
    # A stated cluster.fabric wins over the offer's protocol.
    stated = _plan(FabricSpec(protocol=FabricProtocol.INFINIBAND))
    assert wall_s(stated, FabricProtocol.ETHERNET_TCP) == plain
