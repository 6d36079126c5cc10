"""Catalogue reads, model presets and probes over HTTP."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service.catalog.migrate import SCHEMA_HEAD
from service.catalog.seed_data import accelerator_seeds
from service.core.presets import PRESETS
from tests.api.test_estimates import assert_problem


class TestListAccelerators:
    def test_pages_cover_every_accelerator_once(self, client: TestClient) -> None:
        ids: list[str] = []
        token = None
        while True:
            params: dict[str, str | int] = {"page_size": 5}
            if token:
                params["page_token"] = token
            page = client.get("/v1/accelerators", params=params).json()
            ids += [item["id"] for item in page["items"]]
            token = page["next_page_token"]
            if token is None:
                break
        assert ids == sorted(ids)
        assert len(ids) == len(set(ids)) == len(accelerator_seeds())

    def test_page_size_over_200_is_rejected(self, client: TestClient) -> None:
        assert_problem(client.get("/v1/accelerators", params={"page_size": 201}), 422,
                       "page_size")

    def test_forged_page_token_is_a_400(self, client: TestClient) -> None:
        assert_problem(client.get("/v1/accelerators", params={"page_token": "%%%"}), 400)


class TestGetAccelerator:
    def test_returns_datasheet_figures_with_source(self, client: TestClient) -> None:
        data = client.get("/v1/accelerators/h100-sxm5-80gb").json()
        assert data["bf16_tflops"] == 989
        assert data["memory_gib"] == 79.18  # what the device exposes (measured), not "80 GB"
        assert data["purchase_price_usd"] == "27500.00"
        assert "datasheet" in data["source"]

    def test_unknown_id_is_a_404_problem(self, client: TestClient) -> None:
        problem = assert_problem(client.get("/v1/accelerators/nope"), 404)
        assert "nope" in problem["detail"]


class TestListModels:
    def test_lists_every_preset_with_counts(self, client: TestClient) -> None:
        items = client.get("/v1/models", params={"page_size": 200}).json()["items"]
        assert {item["name"] for item in items} == set(PRESETS)
        gpt3 = next(i for i in items if i["name"] == "gpt3-175b")
        assert abs(gpt3["params_total"] / gpt3["published_params"] - 1) < 0.01


class TestProbes:
    def test_livez(self, client: TestClient) -> None:
        assert client.get("/livez").json()["status"] == "ok"

    def test_readyz_reports_the_schema_revision(self, client: TestClient) -> None:
        response = client.get("/readyz")
        assert response.status_code == 200
        assert response.json() == {"status": "ready", "schema_revision": SCHEMA_HEAD}

    def test_readyz_is_503_on_an_unmigrated_database(self, tmp_path: object) -> None:
        from service.main import create_app, dispose
        from service.settings import Settings

        app = create_app(Settings(database_url=f"sqlite:///{tmp_path}/empty.sqlite3"))
        with TestClient(app) as client:
            problem = assert_problem(client.get("/readyz"), 503)
            assert "migrations" in problem["detail"]
        dispose(app)

    def test_unknown_route_is_a_404_problem(self, client: TestClient) -> None:
        assert_problem(client.get("/v1/nothing-here"), 404)
