"""Rolling releases (issue 41): a replica of release N-1 stays ready, and serves reads and
writes, after release N's expand-only migration has run; a contract step ends its readiness.

Release N is simulated faithfully: a copy of this repository's migrations with one more
Alembic revision file, applied by Alembic itself (``command.upgrade``) while the N-1 app is
already running (its pools and caches warm), as the migration Job of a rolling release would.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import text

from service.catalog import migrate
from service.catalog.db import make_engine
from service.main import create_app, dispose
from service.settings import Settings
from tests.conftest import BACKENDS
from tests.factories import seeded_database_with_key

NEXT = f"{int(migrate.SCHEMA_HEAD) + 1:04d}"
AFTER = f"{int(migrate.SCHEMA_HEAD) + 2:04d}"

STEP = '''"""release N: {kind}

Revision ID: {revision}
Revises: {down}
"""
import sqlalchemy as sa
from alembic import op

revision = {revision!r}
down_revision = {down!r}
branch_labels = None
depends_on = None
OLDEST_COMPATIBLE_CODE = {oldest!r}


def upgrade():
    {ddl}
    op.bulk_insert(sa.table("schema_compatibility", sa.column("revision", sa.String),
                            sa.column("oldest_compatible_code", sa.String)),
                   [{{"revision": revision, "oldest_compatible_code": OLDEST_COMPATIBLE_CODE}}])


def downgrade():
    pass
'''
EXPAND = 'op.add_column("quotes", sa.Column("release_n_note", sa.Text(), nullable=True))'
CONTRACT = 'op.drop_column("quotes", "release_n_note")'
QUOTE = {"workload": {"gpu_hours": {"accelerator": "h100-sxm5-80gb", "gpu_hours": 5000,
                                    "num_gpus": 64}},
         "terms": ["on_demand"], "providers": ["aws"]}


def release(tmp_path: Path, url: str, revision: str, down: str, oldest: str, ddl: str) -> None:
    """Alembic upgrades ``url`` through a copy of the migrations plus one revision file."""
    scripts = tmp_path / "migrations"
    if not scripts.exists():
        shutil.copytree(migrate.PROJECT_ROOT / "migrations", scripts,
                        ignore=shutil.ignore_patterns("__pycache__"))
    (scripts / "versions" / f"release_{revision}.py").write_text(STEP.format(
        kind="contract" if oldest == revision else "expand", revision=revision, down=down,
        oldest=oldest, ddl=ddl))
    config = migrate.alembic_config(url)
    config.set_main_option("script_location", str(scripts))
    command.upgrade(config, "head")


@pytest.fixture(params=BACKENDS)
def running(request: pytest.FixtureRequest,
            database_url_factory: Callable[[str], str]) -> Iterator[tuple[str, TestClient, str]]:
    url = database_url_factory(request.param)
    key = seeded_database_with_key(url, name="rolling", scopes=[
        "quotes:write", "quotes:read", "catalog:read"])
    app = create_app(Settings(database_url=url, search_workers=0, warm_up=False))
    with TestClient(app) as client:
        yield url, client, key
    dispose(app)


def quote(client: TestClient, key: str) -> str:
    response = client.post("/v1/quotes", json=QUOTE, headers={
        "Authorization": f"Bearer {key}", "Idempotency-Key": uuid.uuid4().hex})
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_n_minus_1_stays_ready_and_serves_after_an_expand_step_then_stops_at_a_contract(
        running: tuple[str, TestClient, str], tmp_path: Path) -> None:
    url, client, key = running
    auth = {"Authorization": f"Bearer {key}"}
    assert client.get("/readyz").json() == {"status": "ready",
                                            "schema_revision": migrate.SCHEMA_HEAD}
    before = quote(client, key)

    release(tmp_path, url, NEXT, migrate.SCHEMA_HEAD, migrate.SCHEMA_HEAD, EXPAND)

    ready = client.get("/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json() == {"status": "ready", "schema_revision": NEXT}
    after = quote(client, key)  # a write on the newer schema
    for quote_id in (before, after):  # reads, old rows and new
        assert client.get(f"/v1/quotes/{quote_id}", headers=auth).status_code == 200
    assert client.post(f"/v1/quotes/{before}/verify", headers=auth).status_code == 200
    offers = client.get("/v1/offers", params={"page_size": 5}, headers=auth)
    assert offers.status_code == 200
    assert offers.json()["items"]
    # This release's migrate (a rollback's Job, cq serve) changes nothing on a newer schema:
    # no downgrade attempt, no older seed over newer facts.
    assert migrate.migrate_and_seed(url) is None
    assert migrate.readiness_of(url).revision == NEXT

    release(tmp_path, url, AFTER, NEXT, AFTER, CONTRACT)

    problem = client.get("/readyz")
    assert problem.status_code == 503
    body = problem.json()
    assert body["type"].endswith("schema-not-ready")
    assert repr(AFTER) in body["detail"]
    assert "contract" in body["detail"]
    assert repr(migrate.SCHEMA_HEAD) in body["detail"]
    with pytest.raises(migrate.SchemaAheadError, match="roll this release forward"):
        migrate.migrate_and_seed(url)


def test_a_newer_schema_without_a_compatibility_row_is_not_ready(
        running: tuple[str, TestClient, str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    url, client, _ = running
    engine = make_engine(url)
    with engine.begin() as conn:  # a later revision applied by a release that predates rows
        conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": NEXT})
    engine.dispose()
    problem = client.get("/readyz")
    assert problem.status_code == 503
    assert "declares no compatibility" in problem.json()["detail"]
    monkeypatch.setenv("CQ_DATABASE_URL", url)
    assert migrate.main([]) == 2  # the migrate command refuses, with its reason on stdout
    assert "declares no compatibility" in capsys.readouterr().out


def test_every_migration_from_0014_declares_its_oldest_compatible_code() -> None:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrate.alembic_config("sqlite://"))
    declared = {}
    for step in script.walk_revisions():
        if step.revision >= "0014":
            oldest = getattr(step.module, "OLDEST_COMPATIBLE_CODE", None)
            assert oldest is not None, f"migration {step.revision} declares no compatibility"
            assert oldest <= step.revision
            assert step.down_revision is not None
            assert oldest >= "0013"
            declared[step.revision] = oldest
    assert migrate.SCHEMA_HEAD in declared


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_rows_match_the_declarations(backend: str,
                                         database_url_factory: Callable[[str], str]) -> None:
    url = database_url_factory(backend)
    migrate.upgrade(url)
    engine = make_engine(url)
    with engine.connect() as conn:
        rows = dict(conn.exec_driver_sql(
            "SELECT revision, oldest_compatible_code FROM schema_compatibility").all())
    engine.dispose()
    assert rows["0014"] == "0013"
    assert rows[migrate.SCHEMA_HEAD] == "0014"  # 0015 (portfolios) is expand-only
    assert all(oldest <= revision for revision, oldest in rows.items())
