"""Migrations and seed, on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, update
from sqlalchemy import text as sa_text
from sqlalchemy.orm import Session

from service.catalog import quotes as store
from service.catalog.changes import compared_by_autogenerate
from service.catalog.db import make_engine
from service.catalog.errors import NotFoundError
from service.catalog.mapping import accelerator_to_spec
from service.catalog.migrate import (
    SCHEMA_HEAD,
    alembic_config,
    current_revision,
    downgrade,
    main,
    upgrade,
)
from service.catalog.models import Base, OfferRevision, Quote
from service.catalog.prices import current_version_id, version_revisions
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
                    conn, opts={"compare_type": True, "render_as_batch": backend == "sqlite",
                                "include_name": compared_by_autogenerate}
                )
                assert compare_metadata(context, Base.metadata) == []
        finally:
            engine.dispose()

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_downgrading_below_compressed_lines_keeps_every_line(
        self, backend: str, database_url_factory: Callable[[str], str]
    ) -> None:
        """0010 -> 0009 writes each compressed quote's lines back as text (decision 163)."""
        url = database_url_factory(backend)
        engine: Engine = make_engine(url)
        texts = {f"q_downgrade_{n}": json.dumps(
            {"lines": [{"provider": "gcp", "total": f"{i}.{n:02d}"} for i in range(50)]},
            separators=(",", ":")) for n in range(3)}
        try:
            upgrade(url)
            with Session(engine) as session:
                seed_catalog(session)
                version = current_version_id(session)
                assert version is not None
                now = dt.datetime(2026, 11, 27, tzinfo=dt.UTC)
                for quote_id, text in texts.items():
                    session.add(Quote(
                        id=quote_id, principal="p", team=None, idempotency_key=quote_id,
                        request_hash="h", request_id="r", created_at=now, expires_at=now,
                        catalog_version_id=version, catalog_content_hash="0" * 64,
                        estimator_version="test", verdict=None, requote_of=None, request={},
                        response="{}", lines=None, lines_zstd=store.pack_lines(text),
                        policy_name=None, policy_revision=None))
                session.commit()
            downgrade(url, "0009")
            with engine.connect() as conn:
                assert "lines_zstd" not in {c["name"] for c in inspect(conn).get_columns(
                    "quotes")}
                stored: dict[str, str] = dict(
                    conn.execute(sa_text("SELECT id, lines FROM quotes")).all())
                assert stored == texts
            upgrade(url)
            with Session(engine) as session:
                for quote_id, text in texts.items():
                    row = session.get(Quote, quote_id)
                    assert row is not None
                    assert row.lines_zstd is None
                    assert store.stored_lines(row) == json.loads(text)["lines"]
        finally:
            engine.dispose()

    @pytest.mark.parametrize("backend", BACKENDS)
    def test_observed_at_up_down_up_keeps_the_offers_and_invents_no_day(
        self, backend: str, database_url_factory: Callable[[str], str]
    ) -> None:
        """0013 adds offer_revisions.observed_at (issue 39). Down to 0012 drops it with the
        offers intact; up again, stored revisions read NULL (the migration invents no day),
        and the seed step dates only the offers that are exactly the seed's, in one new
        version (the old versions stay as they were)."""
        url = database_url_factory(backend)
        engine: Engine = make_engine(url)

        def columns() -> set[str]:
            with engine.connect() as conn:
                return {c["name"] for c in inspect(conn).get_columns("offer_revisions")}

        try:
            upgrade(url)
            assert "observed_at" in columns()
            with Session(engine) as session:
                seed_catalog(session)
                session.commit()
            with engine.connect() as conn:
                before = conn.execute(sa_text(
                    "SELECT count(*), count(observed_at) FROM offer_revisions")).one()
            assert before[0] == before[1] > 2000  # a fresh seed dates every offer
            downgrade(url, "0012")
            assert current_revision(engine) == "0012"
            assert "observed_at" not in columns()
            with engine.connect() as conn:
                assert conn.execute(sa_text(
                    "SELECT count(*) FROM offer_revisions")).scalar_one() == before[0]
            upgrade(url)
            assert current_revision(engine) == SCHEMA_HEAD
            with engine.connect() as conn:
                assert conn.execute(sa_text(
                    "SELECT count(observed_at) FROM offer_revisions")).scalar_one() == 0
            with Session(engine) as session:
                old = current_version_id(session)
                report = seed_catalog(session)
                session.commit()
                assert report.facts_version is not None
                fresh = version_revisions(session, report.facts_version)
                assert len(fresh) == before[0]
                assert {r.observed_at for r in fresh} == {dt.date(2026, 11, 22),
                                                          dt.date(2026, 11, 24)}
                assert old is not None
                assert all(r.observed_at is None for r in version_revisions(session, old))
                assert seed_catalog(session).facts_version is None
        finally:
            engine.dispose()

    @pytest.mark.postgres
    def test_postgresql_stores_compressed_lines_without_compressing_them_again(
        self, database_url_factory: Callable[[str], str]
    ) -> None:
        """0011 sets ``quotes.lines_zstd`` to EXTERNAL storage: pglz would compress a fast
        zstd frame's plain literals a second time (decision 167); 0010 had the default."""
        url = database_url_factory("postgres")
        engine: Engine = make_engine(url)

        def storage() -> str:
            with engine.connect() as conn:
                return str(conn.execute(sa_text(
                    "SELECT attstorage FROM pg_attribute WHERE attrelid = 'quotes'::regclass "
                    "AND attname = 'lines_zstd'")).scalar_one())

        try:
            upgrade(url)
            assert storage() == "e"
            downgrade(url, "0010")
            assert storage() == "x"
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

    def test_seed_is_idempotent_for_prices_too(self, db_session: Session) -> None:
        report = seed_catalog(db_session)
        assert (report.price_version, report.facts_version) == (None, None)

    def test_a_catalogue_seeded_before_fabric_facts_gets_one_version_with_them(
        self, db_session: Session
    ) -> None:
        old = current_version_id(db_session)
        assert old is not None
        # As a database seeded before schema 0004 holds it: no fabric, unlabelled spot rates.
        db_session.execute(update(OfferRevision).values(
            nvlink_domain=None, inter_node_gbps=None, fabric_source=None, content_hash="old"))
        db_session.execute(update(OfferRevision).where(OfferRevision.term == "spot").values(
            interruption_rate_source="default: a guess"))
        report = seed_catalog(db_session)
        assert report.facts_version is not None
        assert current_version_id(db_session) == report.facts_version
        fresh = {r.offer_id: r for r in version_revisions(db_session, report.facts_version)}
        p5 = [r for r in fresh.values() if r.instance_type == "p5.48xlarge"]
        assert p5
        assert all((r.nvlink_domain, r.inter_node_gbps) == (8, 3200.0) for r in p5)
        assert not any((r.interruption_rate_source or "").startswith("default:")
                       for r in fresh.values())
        # The old version still reads as it was, so quotes on it verify.
        assert all(r.inter_node_gbps is None for r in version_revisions(db_session, old))
        assert seed_catalog(db_session).facts_version is None

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
        assert spec.memory_bytes == pytest.approx(79.18 * GIB_BYTES)  # measured, see notes
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


def test_the_migration_jobs_one_line_is_json_in_the_service_log_format(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 18: every log line is JSON, the migration Job's summary too."""
    monkeypatch.setenv("CQ_DATABASE_URL", f"sqlite:///{tmp_path}/job.sqlite3")
    assert main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert {"ts", "level", "logger", "message"} <= set(entry)
    assert entry["level"] == "info"
    assert entry["message"].startswith("seeded: ")
    assert entry["offers"] > 2000
