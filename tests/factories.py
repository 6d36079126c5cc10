"""Plain typed factories with keyword overrides."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from service.catalog.mapping import accelerator_to_spec
from service.catalog.seed_data import accelerator_seeds
from service.core.presets import get_preset
from service.core.specs import (
    AcceleratorSpec,
    ClusterSpec,
    ModelSpec,
    ParallelismPlan,
    Precision,
    TrainingSpec,
)


def accelerator(accelerator_id: str = "h100-sxm5-80gb") -> AcceleratorSpec:
    seed = next(s for s in accelerator_seeds() if s.id == accelerator_id)
    return accelerator_to_spec(seed)


def model(preset: str = "llama3.1-70b", **overrides: Any) -> ModelSpec:
    return dataclasses.replace(get_preset(preset).model, **overrides)


def cluster(num_gpus: int = 64, accelerator_id: str = "h100-sxm5-80gb",
            gpus_per_node: int = 8) -> ClusterSpec:
    return ClusterSpec(accelerator=accelerator(accelerator_id), num_gpus=num_gpus,
                       gpus_per_node=gpus_per_node)


def plan(**overrides: Any) -> ParallelismPlan:
    values: dict[str, Any] = {"tp": 4, "pp": 4, "dp": 2, "cp": 2, "vp": 5}
    values.update(overrides)
    return ParallelismPlan(**values)


def training(**overrides: Any) -> TrainingSpec:
    values: dict[str, Any] = {"seq_len": 8192, "global_batch_seqs": 128, "tokens": 15e12,
                              "precision": Precision.BF16}
    values.update(overrides)
    return TrainingSpec(**values)


def seeded_database_with_key(url: str, *, name: str, scopes: list[str]) -> str:
    """Migrate and seed the database at ``url`` and store one API key; returns the key."""
    from sqlalchemy.orm import Session

    from service.catalog.db import make_engine
    from service.catalog.keys import create_key
    from service.settings import Settings
    from tests.databases import migrate_and_seed

    migrate_and_seed(url)
    engine = make_engine(url)
    try:
        with Session(engine) as session:
            _, key = create_key(session, name=name, scopes=scopes,
                                pepper=Settings().api_key_pepper.get_secret_value())
            session.commit()
    finally:
        engine.dispose()
    return key


def date_offers(session: Any, *, as_of: str | None = None,
                providers: tuple[str, ...] = ("aws", "gcp", "lambda", "nebius", "azure")) -> str:
    """An operator's refresh: the current version's undated offers of ``providers`` imported
    again with a date (default today, UTC), as a price-list import would date them. The seed's
    SkyPilot rows carry no date (issue 17), so a quote that must approve under the default
    policy's max_price_age_s needs this first. Returns the new version id; flushes only."""
    import datetime as dt

    from service.catalog.prices import (
        ImportMode,
        current_version_id,
        import_offers,
        revision_content,
        version_revisions,
    )

    day = as_of or dt.datetime.now(dt.UTC).date().isoformat()
    current = current_version_id(session)
    rows = [{**offer.canonical(), "as_of": day}
            for offer in (revision_content(r) for r in version_revisions(session, current))
            if offer.as_of is None and offer.provider in providers]
    version = import_offers(session, rows, mode=ImportMode.PATCH, created_by="test-refresh",
                            note="test: the undated seed prices, dated as a refresh would")
    return version.id


def date_offers_at(url: str, **kwargs: Any) -> str:
    """``date_offers`` on the database at ``url``, committed."""
    from sqlalchemy.orm import Session

    from service.catalog.db import make_engine

    engine = make_engine(url)
    try:
        with Session(engine) as session:
            version = date_offers(session, **kwargs)
            session.commit()
    finally:
        engine.dispose()
    return version


def auth_headers(session: Any, keys: dict[str, tuple[tuple[str, ...], str | None]],
                 ) -> dict[str, dict[str, str]]:
    """An Authorization header per name of ``keys`` ({name: (scopes, team)}), each key and
    team named with a fresh suffix so tests sharing a database do not meet, and
    ``"anonymous"``: no header."""
    from service.catalog.keys import create_key
    from service.settings import Settings

    pepper = Settings().api_key_pepper.get_secret_value()
    suffix = uuid.uuid4().hex[:6]
    made: dict[str, dict[str, str]] = {}
    for who, (scopes, team) in keys.items():
        _, key = create_key(session, name=f"{who}-{suffix}", scopes=list(scopes),
                            team=f"{team}-{suffix}" if team else None, pepper=pepper)
        made[who] = {"Authorization": f"Bearer {key}"}
    made["anonymous"] = {}
    return made
