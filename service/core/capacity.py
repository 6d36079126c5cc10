"""Capacity limits per term and region (issue 39, "Capacity for every term"): how many GPUs of
one instance type in one region a quote may count on, besides spot's per-zone check
(``policy.SPOT_CAPACITY_UNVERIFIED_GPUS``), and the sizing of an SLO-bound serving fleet's
spare instances on spot.

Pure: sourced constants and functions of a line's instance count, the policy's limits and the
provider's name; ``core.policy`` turns them into rule results. No provider publishes how many
GPUs it can sell one customer: on-demand and reservation quotas are set per account and
region and raised on request, and a quota is no promise that capacity exists (Google Cloud:
"Quotas don't guarantee that resources are always available"; Microsoft: "A quota is a credit
limit on Azure resources, not a capacity guarantee"). What providers do publish are the sizes
of what they sell as self-service capacity, and those anchor the defaults below.
"""

from __future__ import annotations

import math
from types import MappingProxyType

CAPACITY_BLOCK_MAX_INSTANCES = 64
"""AWS EC2 Capacity Blocks for ML: "Each Capacity Block can have up to 64 instances, and you
can have up to 256 instances across Capacity Blocks" (Amazon EC2 User Guide, 'Find and
purchase Capacity Blocks',
https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-purchase.html; instance
counts 1, 2, 4, 8, 16, 32 or 64). The instances of one block are placed together in one
EC2 UltraCluster in one Availability Zone; several blocks are not promised one placement, so
a job on more instances than one block holds cannot count on one network. The policy's
``max_capacity_block_instances`` defaults to this."""

CAPACITY_BLOCK_MAX_INSTANCES_PER_ACCOUNT = 256
"""... and at most 256 instances across one account's Capacity Blocks (same page)."""

SELF_SERVICE_MAX_GPUS_PER_REGION = CAPACITY_BLOCK_MAX_INSTANCES_PER_ACCOUNT * 8
"""2,048 GPUs: AWS's 256 instances across an account's Capacity Blocks, of its 8-GPU
instances (p5.48xlarge, p4d.24xlarge), the largest GPU allocation to one account that any
provider publishes as bought without a sales agreement. An assumption of this service (as
the spot 64 is): above it, nothing public shows that one account gets that many GPUs of one
instance type in one region on demand or on a reservation bought at list price; such
capacity is negotiated. The policy's ``max_on_demand_gpus_per_region`` and
``max_reserved_gpus_per_region`` default to it; a policy sets them to the quota its
accounts hold (docs/policies.md)."""

QUOTA_SOURCES = MappingProxyType({
    "aws": ("AWS sets On-Demand quotas per account and Region in vCPUs of an instance family "
            "('Running On-Demand P instances'; a p5.48xlarge counts 192 vCPUs) and raises them "
            "on request in Service Quotas "
            "(https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html); "
            "new Reserved Instances are limited to 20 regional per Region per month by default "
            "(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ri-limits.html)"),
    "gcp": ("Google Cloud sets a GPU quota per model and region per project (for example "
            "NVIDIA_H100_GPUS); 'not all projects have the same quotas' and quotas 'don't "
            "guarantee that resources are always available' "
            "(https://cloud.google.com/compute/resource-usage)"),
    "azure": ("Azure sets a vCPU quota per VM family and region per subscription (for example "
              "'Standard NDSH100v5 Family vCPUs'), raised on request; 'a quota is a credit "
              "limit on Azure resources, not a capacity guarantee' "
              "(https://learn.microsoft.com/azure/quotas/per-vm-quota-requests)"),
})
"""Where each provider publishes its per-account GPU quotas, quoted in every capacity reason
of its lines; another provider publishes none (``OTHER_QUOTA_SOURCE``)."""

OTHER_QUOTA_SOURCE = ("the provider publishes no per-account GPU limit; capacity beyond its "
                      "self-service sizes is agreed with its sales team")

LIMIT_SOURCE = ("the built-in limit is 2,048 GPUs, AWS's published maximum of 256 instances "
                "across one account's Capacity Blocks "
                "(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-"
                "purchase.html), the largest GPU allocation any provider sells one account "
                "without a sales agreement")
"""Why the default region limits are what they are (``SELF_SERVICE_MAX_GPUS_PER_REGION``)."""


def quota_source(provider: str) -> str:
    """Where ``provider`` publishes its account quotas (``QUOTA_SOURCES``)."""
    return QUOTA_SOURCES.get(provider, OTHER_QUOTA_SOURCE)


SPARE_SHORTFALL_PROBABILITY = 0.001
"""An SLO-bound serving fleet on spot carries enough spare instances that it is short of
replicas at most 0.1 % of the time (about 43 minutes a month: "three nines", a common
availability target for a serving fleet). An assumption of this service, not a provider's
figure."""

MIN_SPARE_INSTANCES = 1
"""At least one spare: one eviction, the event spot is sold on, must not take a replica the
SLO counts on out of service (issue 39)."""


def spare_instances(instances: int, rate_per_instance_s: float, restart_s: float) -> int:
    """Spare instances an SLO-bound fleet of ``instances`` needs on spot: the smallest k of
    at least ``MIN_SPARE_INSTANCES`` with P(N > k) <= ``SPARE_SHORTFALL_PROBABILITY``, where N,
    the instances down at a moment, is Poisson with mean ``instances`` x rate x restart (the
    M/G/inf queue's occupancy in steady state, whatever the restart's distribution: Takacs,
    'Introduction to the Theory of Queues', 1962; the mean is ``interruption_fraction``'s
    λ·R per instance). Spot evictions can come in bursts when a provider reclaims capacity,
    which a Poisson count understates; the minimum of one spare covers the single eviction."""
    mean = instances * rate_per_instance_s * restart_s
    k = 0
    term = math.exp(-mean)  # P(N = 0)
    below = term  # P(N <= k)
    while 1.0 - below > SPARE_SHORTFALL_PROBABILITY and k < instances:
        k += 1
        term *= mean / k
        below += term
    return max(k, MIN_SPARE_INSTANCES)
