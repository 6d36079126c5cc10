"""Migrations and seed, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect
from sqlalchemy.orm import Session

from service.catalog.db import make_engine
from service.catalog.errors import NotFoundError
from service.catalog.mapping import accelerator_to_spec
from service.catalog.migrate import (
    SCHEMA_HEAD,
    alembic_config,
    current_revision,
    downgrade,
    upgrade,
)
from service.catalog.models import Base
from service.catalog.repository import get_accelerator, list_accelerators
from service.catalog.seed import seed_catalog
from service.core.specs import Precision
from service.core.units import GIB_BYTES
from tests.conftest import BACKENDS

REQUIRED_IDS = {
    "v100-sxm2-32gb", "a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h100-pcie-80gb",
    "h100-96gb-500w", "h800-sxm5-80gb", "h200-sxm-141gb", "b200-sxm-180gb", "l40s-48gb",
    "l4-24gb", "mi300x-192gb", "tpu-v5p",
}


class TestMigrations:
    def test_schema_head_constant_matches_the_migrations(self) -> None:
        script = ScriptDirectory.from_config(alembic_config("sqlite://"))
        assert script.get_heads() == [SCHEMA_HEAD]

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_upgrade_downgrade_upgrade_and_no_autogenerate_diff(
        self, backend: str, database_url_factory: Callable[[str], str]
    ) -> None:
        url = database_url_factory(backend)
        engine: Engine = make_engine(url)
        try:
            upgrade(url)
            assert current_revision(engine) == SCHEMA_HEAD
            downgrade(url, "base")
            assert not inspect(engine).has_table("accelerators")
            assert current_revision(engine) is None
            upgrade(url)
            with engine.connect() as conn:
                context = MigrationContext.configure(
                    conn, opts={"compare_type": True, "render_as_batch": backend == "sqlite"}
                )
                assert compare_metadata(context, Base.metadata) == []
        finally:
            engine.dispose()


class TestSeed:
    def test_seed_has_every_required_accelerator_with_source_and_date(
        self, db_session: Session
    ) -> None:
        rows = {row.id: row for row in list_accelerators(db_session)}
        assert set(rows) >= REQUIRED_IDS
        for row in rows.values():
            assert row.source.strip()
            assert row.as_of is not None

    def test_seed_is_idempotent(self, db_session: Session) -> None:
        report = seed_catalog(db_session)
        assert report.inserted == 0
        assert report.updated == 0
        assert len(list_accelerators(db_session)) == report.unchanged

    def test_reseed_repairs_an_edited_row(self, db_session: Session) -> None:
        get_accelerator(db_session, "h100-sxm5-80gb").bf16_tflops = 1.0
        db_session.flush()
        assert seed_catalog(db_session).updated == 1
        assert get_accelerator(db_session, "h100-sxm5-80gb").bf16_tflops == 989

    def test_h800_has_h100_compute_and_slower_nvlink(self, db_session: Session) -> None:
        h100 = accelerator_to_spec(get_accelerator(db_session, "h100-sxm5-80gb"))
        h800 = accelerator_to_spec(get_accelerator(db_session, "h800-sxm5-80gb"))
        assert h800.peak_flops_per_s == h100.peak_flops_per_s
        assert h800.scaleup_bytes_per_s < h100.scaleup_bytes_per_s

    def test_mapping_converts_datasheet_units_once(self, db_session: Session) -> None:
        spec = accelerator_to_spec(get_accelerator(db_session, "h100-sxm5-80gb"))
        assert spec.memory_bytes == 80 * GIB_BYTES
        assert spec.hbm_bytes_per_s == pytest.approx(3.35e12)
        assert spec.peak_flops_per_s[Precision.BF16] == pytest.approx(989e12)
        assert spec.scaleout_bytes_per_s == pytest.approx(400e9 / 8)

    def test_keyset_pagination_walks_every_row_once(self, db_session: Session) -> None:
        seen: list[str] = []
        after = None
        while True:
            page = list_accelerators(db_session, limit=4, after_id=after)
            if not page:
                break
            seen += [row.id for row in page]
            after = page[-1].id
        assert seen == sorted(seen)
        assert len(seen) == len(set(seen)) >= len(REQUIRED_IDS)

    def test_unknown_id_raises_not_found(self, db_session: Session) -> None:
        with pytest.raises(NotFoundError, match="no accelerator"):
            get_accelerator(db_session, "h999")
