"""The CLI tests' local database and the API on it (each test module gets its own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from service.main import create_app, dispose
from service.settings import Settings
from tests.databases import migrate_and_seed
from tests.factories import date_offers_at


@pytest.fixture(scope="module")
def local_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('cli')}/local.sqlite3"
    migrate_and_seed(url)
    date_offers_at(url)  # a refreshed catalogue: the seed's SkyPilot prices carry no date
    return url


@pytest.fixture
def local(local_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """``cq --local`` runs on the module's database."""
    monkeypatch.setenv("CQ_DATABASE_URL", local_url)
    return local_url


@pytest.fixture(scope="module")
def api(local_url: str) -> Iterator[TestClient]:
    """The API itself on the same database, to compare against."""
    application = create_app(Settings(database_url=local_url, search_workers=0))
    with TestClient(application) as client:
        yield client
    dispose(application)
