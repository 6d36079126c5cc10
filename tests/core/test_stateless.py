"""The core keeps no state between calls (issue 38): no module of ``service/core`` holds a
mutable container or a memoised function, and pricing, estimates and searches leave every
module global as they found it. Reuse inside one call is fine; constant tables are tuples,
frozensets or ``types.MappingProxyType``."""

from __future__ import annotations

import collections
import dataclasses
import importlib
import pkgutil
import random
from collections.abc import Iterator
from decimal import Decimal
from types import ModuleType

import pytest

import service.core
from service.core import quote as q
from service.core.policy import DEFAULT_POLICY
from tests import factories

MUTABLE = (dict, list, set, bytearray, collections.deque)
"""Containers a module global may not be (OrderedDict, defaultdict and Counter are dicts)."""


def core_modules() -> Iterator[ModuleType]:
    for info in pkgutil.iter_modules(service.core.__path__):
        yield importlib.import_module(f"service.core.{info.name}")


def module_state(module: ModuleType) -> Iterator[tuple[str, str]]:
    """(name, why) of each global of ``module`` that can keep state between calls."""
    for name, value in vars(module).items():
        if name.startswith("__"):
            continue
        if isinstance(value, MUTABLE):
            yield name, f"a module-level {type(value).__name__}"
        elif callable(value) and (hasattr(value, "cache_info")
                                  or hasattr(value, "cache_clear")):
            yield name, "a memoised function (functools.cache / lru_cache)"


@pytest.mark.parametrize("module", list(core_modules()), ids=lambda m: m.__name__)
def test_no_module_of_the_core_holds_a_mutable_container_or_a_memo(module: ModuleType) -> None:
    found = dict(module_state(module))
    assert not found, f"{module.__name__} keeps state between calls: {found}"


def test_the_check_sees_each_kind_of_state() -> None:
    import functools

    fake = ModuleType("fake")
    fake.TABLE = {}  # type: ignore[attr-defined]
    fake.SEEN = collections.OrderedDict()  # type: ignore[attr-defined]
    fake.ITEMS = []  # type: ignore[attr-defined]
    fake.cached = functools.lru_cache(maxsize=8)(abs)  # type: ignore[attr-defined]
    fake.forever = functools.cache(abs)  # type: ignore[attr-defined]
    assert set(dict(module_state(fake))) == {"TABLE", "SEEN", "ITEMS", "cached", "forever"}


def snapshot() -> dict[tuple[str, str], tuple[int, int | None]]:
    """Every global of every core module, by (module, name): its identity and, where it has
    one, its length (a container filled at call time grows)."""
    taken: dict[tuple[str, str], tuple[int, int | None]] = {}
    for module in core_modules():
        for name, value in vars(module).items():
            try:
                size: int | None = len(value)
            except TypeError:
                size = None
            taken[(module.__name__, name)] = (id(value), size)
    return taken


HGX = q.Fabric(gpus_per_instance=8, nvlink_domain=8, inter_node_gbps=3200.0)


def offers(rnd: random.Random) -> list[q.PriceOffer]:
    made = []
    for i, term in enumerate([*q.Term, q.Term.SPOT]):
        if term is q.Term.ONPREM:
            continue
        made.append(q.PriceOffer(
            offer_id=f"off_{i}", provider=rnd.choice(["aws", "gcp"]), region="us-east-1",
            zone=None, instance_type="p5.48xlarge", accelerator="h100", term=term,
            payment_option="no_upfront" if term.value.startswith("reserved") else None,
            currency="USD",
            price_per_instance_hour=Decimal(rnd.randint(2000, 9000)) / 100, fabric=HGX,
            fabric_source="test", interruption_rate_per_hour=0.002,
            interruption_rate_source="test", interruption_rate_assumed=True,
            region_carbon_g_per_kwh=rnd.choice([None, 300.0]), as_of="2026-11-01",
            as_of_day=739_000 - rnd.randint(0, 400), indicative=False, derived=False,
            quality_flags=(), on_demand_rate=Decimal("98.32")))
    return made


def a_quote(rnd: random.Random, day: int) -> q.QuoteResult:
    wall = rnd.uniform(1e4, 1e7)
    job = q.SizedJob(accelerator="h100", num_gpus=rnd.choice([8, 64, 512]),
                     timing=q.JobTiming(wall_s=wall, wall_s_p10=wall * 0.8,
                                        wall_s_p90=wall * 1.3, basis="test"),
                     checkpoint_bytes=rnd.choice([0.0, 1e12]), power_w_per_gpu=1000.0,
                     fast_domain=8)
    options = dataclasses.replace(
        q.Options(), budget=Decimal(rnd.randint(10_000, 9_000_000)),
        deadline_s=rnd.choice([None, 30 * 86_400.0]),
        accounting=rnd.choice(list(q.Accounting)))
    return q.price_all(jobs=[job], offers=offers(rnd), timings={}, onprem={}, options=options,
                       policy=DEFAULT_POLICY, today=day, version_id="cv_000001",
                       gated=True)


def work(seed: int) -> None:
    """Varied quotes over several days, estimates and a small plan search."""
    from service.core.estimate import estimate
    from service.core.search import SearchRequest, SearchSpace, search

    rnd = random.Random(seed)
    for i in range(40):
        a_quote(rnd, 739_000 + i % 7)
    for gpus in (8, 16, 64):
        estimate(factories.model("llama3.1-8b"), factories.cluster(num_gpus=gpus),
                 factories.plan(tp=8, pp=1, dp=gpus // 8, cp=1, vp=1),
                 factories.training(global_batch_seqs=rnd.choice([64, 128])))
    search(SearchRequest(
        model=factories.model("llama3.1-8b"), clusters=(factories.cluster(num_gpus=16),),
        training=factories.training(global_batch_seqs=128),
        space=SearchSpace(base=factories.plan(tp=8, pp=1, dp=2, cp=1, vp=1),
                          vary=frozenset({"tp", "pp", "dp"}))), clock=lambda: 0.0)


def test_quotes_estimates_and_searches_leave_every_module_global_as_it_was() -> None:
    work(1)  # imports and first use done
    before = snapshot()
    work(2)
    after = snapshot()
    changed = {k: (before.get(k), v) for k, v in after.items() if before.get(k) != v}
    assert not changed, f"core globals changed between calls: {changed}"
