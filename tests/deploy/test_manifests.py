"""Deployment files: each Kustomize overlay renders with ``kubectl kustomize``, validates
strictly against the Kubernetes schemas, and keeps the rules the service relies on."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = ["dev", "prod"]
K8S_VERSION = "1.30.0"


def kustomize(overlay: str) -> str | None:
    """``kubectl kustomize`` of an overlay, or None without a kubectl that can render it."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    result = subprocess.run(  # noqa: S603 - fixed arguments
        [kubectl, "kustomize", str(DEPLOY / "k8s" / "overlays" / overlay)],
        capture_output=True, text=True, check=False, timeout=60)
    return result.stdout if result.returncode == 0 else None


def render(overlay: str) -> list[dict[str, Any]]:
    """The live render when kubectl can make one, else the vendored one (make manifests)."""
    text = kustomize(overlay)
    if text is None:
        text = (DEPLOY / "k8s" / "rendered" / f"{overlay}.yaml").read_text()
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_vendored_render_is_current(overlay: str) -> None:
    live = kustomize(overlay)
    if live is None:
        pytest.skip("no kubectl with kustomize here: the vendored render is used as it is")
    vendored = (DEPLOY / "k8s" / "rendered" / f"{overlay}.yaml").read_text()
    assert vendored == live, "run `make manifests` and commit deploy/k8s/rendered/"


@pytest.fixture(scope="module", params=OVERLAYS)
def docs(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render(request.param)


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def test_every_resource_validates_strictly(docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_deployment_rules(docs: list[dict[str, Any]]) -> None:
    deployment = one(docs, "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] >= 2
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind])
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    # Graceful shutdown (uvicorn) plus the preStop sleep must end before the grace period.
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    graceful = int(re.search(r'"--timeout-graceful-shutdown", "(\d+)"', dockerfile).group(1))  # type: ignore[union-attr]
    assert int(pre_stop[1]) + graceful < pod["terminationGracePeriodSeconds"]
    sources = container["envFrom"]
    assert {"configMapRef", "secretRef"} == {next(iter(s)) for s in sources}
    assert all(not e.get("value", "").startswith("postgresql") for e in container.get("env", []))


def test_secret_holds_the_database_url_and_pepper(docs: list[dict[str, Any]]) -> None:
    secret = one(docs, "Secret")
    assert {"CQ_DATABASE_URL", "CQ_API_KEY_PEPPER"} <= set(secret["stringData"])
    config = one(docs, "ConfigMap")
    assert not {"CQ_DATABASE_URL", "CQ_API_KEY_PEPPER"} & set(config["data"])


def test_service_pdb_hpa_and_migration_job(docs: list[dict[str, Any]]) -> None:
    deployment = one(docs, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    service = one(docs, "Service")
    assert set(service["spec"]["selector"].items()) <= set(labels.items())
    pdb = one(docs, "PodDisruptionBudget")
    assert set(pdb["spec"]["selector"]["matchLabels"].items()) <= set(labels.items())
    hpa = one(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert hpa["spec"]["minReplicas"] >= 2
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    job = one(docs, "Job")
    (migrate,) = job["spec"]["template"]["spec"]["containers"]
    assert migrate["command"][-1] == "service.catalog.migrate"
    assert migrate["securityContext"]["readOnlyRootFilesystem"] is True
    app_command = " ".join(deployment["spec"]["template"]["spec"]["containers"][0].get(
        "command", []))
    assert "migrate" not in app_command


def test_prod_overlay_changes_what_it_should() -> None:
    prod, dev = render("prod"), render("dev")
    assert one(prod, "Deployment")["spec"]["replicas"] == 3
    assert one(prod, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "registry.example.com/computequote:0.1.0")
    assert one(prod, "ConfigMap")["data"]["CQ_REQUIRE_READ_AUTH"] == "true"
    assert one(dev, "ConfigMap")["data"]["CQ_LOG_LEVEL"] == "debug"
    assert {d["metadata"]["namespace"] for d in prod} == {"computequote"}


def test_dockerfile_is_multi_stage_locked_and_non_root() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert len(re.findall(r"^FROM ", text, re.MULTILINE)) >= 2
    assert "uv sync --frozen --no-dev" in text
    user = re.findall(r"^USER (\S+)", text, re.MULTILINE)
    assert user
    assert not user[-1].startswith(("root", "0"))
    assert "HEALTHCHECK" in text
    assert "/livez" in text


def test_compose_has_postgres_a_one_shot_migration_and_the_app() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert services["db"]["image"] == "postgres:15"
    assert services["migrate"]["command"][-1] == "service.catalog.migrate"
    assert services["app"]["depends_on"]["migrate"]["condition"] == (
        "service_completed_successfully")


def test_the_price_refresh_cronjob_validates_and_runs_a_real_command() -> None:
    """deploy/k8s/optional/price-refresh-cronjob.yaml: schema-valid, and its command line is
    one the CLI accepts (every option it passes exists)."""
    from typer.testing import CliRunner

    from service.cli import app

    doc = yaml.safe_load((DEPLOY / "k8s/optional/price-refresh-cronjob.yaml").read_text())
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    spec = doc["spec"]["jobTemplate"]["spec"]
    assert doc["spec"]["concurrencyPolicy"] == "Forbid"
    assert spec["activeDeadlineSeconds"] <= 3600
    container = spec["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[:3] == ["cq", "catalog", "refresh"]
    assert "--hold-on-moves" in command
    help_text = CliRunner().invoke(app, ["catalog", "refresh", "--help"],
                                   env={"COLUMNS": "200"}).output
    for option in (c for c in command[3:] if c.startswith("--")):
        assert option in help_text, option
    assert container["envFrom"] == [{"secretRef": {"name": "computequote-refresh"}}]
