"""Deployment files: each Kustomize overlay renders with ``kubectl kustomize``, validates
strictly against the Kubernetes schemas, and keeps the rules the service relies on.

Issue 18: prod holds no Secret with a value (it references one it does not own); the
migration Job is named after the release, so two releases rendered and applied in order to
``ApiServer`` (a stand-in for the API server's create-or-update and immutable-field rules,
no cluster needed) both succeed; and the pod's grace period covers the whole shutdown."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from service.api.workers import WORKER_STOP_S

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = ["dev", "prod"]
K8S_VERSION = "1.30.0"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?")
"""A Job's name: a DNS subdomain, and at most 63 characters, as its pods' job-name label."""


def kustomize(overlay: str, k8s: Path = DEPLOY / "k8s") -> str | None:
    """``kubectl kustomize`` of an overlay, or None without a kubectl that can render it."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    result = subprocess.run(  # noqa: S603 - fixed arguments
        [kubectl, "kustomize", str(k8s / "overlays" / overlay)],
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
    # The preStop sleep, uvicorn's graceful shutdown, then the lifespan ending the search
    # workers (at most 2 x WORKER_STOP_S) must all end before the grace period's SIGKILL.
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    graceful = int(re.search(r'"--timeout-graceful-shutdown", "(\d+)"', dockerfile).group(1))  # type: ignore[union-attr]
    shutdown_s = int(pre_stop[1]) + graceful + 2 * WORKER_STOP_S
    assert shutdown_s < pod["terminationGracePeriodSeconds"]
    sources = container["envFrom"]
    assert {"configMapRef", "secretRef"} == {next(iter(s)) for s in sources}
    assert all(not e.get("value", "").startswith("postgresql") for e in container.get("env", []))


SECRET_KEYS = {"CQ_DATABASE_URL", "CQ_API_KEY_PEPPER"}
SECRET_NAME = "computequote-secrets"


def secrets_with_values(docs: list[dict[str, Any]]) -> list[str]:
    """The names of the Secrets in ``docs`` that carry a literal value (``data`` or
    ``stringData``): applying one overwrites the Secret of the same name in the cluster."""
    return [d["metadata"]["name"] for d in docs
            if d["kind"] == "Secret" and (d.get("data") or d.get("stringData"))]


def secret_references(docs: list[dict[str, Any]]) -> set[str]:
    """The Secret names that the pods of the Deployment and the Job read."""
    names = set()
    for doc in docs:
        if doc["kind"] in ("Deployment", "Job"):
            for container in doc["spec"]["template"]["spec"]["containers"]:
                names |= {s["secretRef"]["name"] for s in container.get("envFrom", [])
                          if "secretRef" in s}
    return names


def test_prod_holds_no_secret_with_a_value_and_reads_the_one_it_does_not_own() -> None:
    """Issue 18: applying prod overwrote the real Secret with REPLACE_ME placeholders."""
    prod = render("prod")
    assert secrets_with_values(prod) == []
    assert secret_references(prod) == {SECRET_NAME}


def test_the_secret_policy_catches_a_placeholder_secret() -> None:
    """The policy above fails on what the base used to ship to every overlay."""
    placeholder = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                   "metadata": {"name": SECRET_NAME},
                   "stringData": {"CQ_API_KEY_PEPPER": "REPLACE_ME"}}
    empty = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "other"}}
    assert secrets_with_values([*render("prod"), placeholder, empty]) == [SECRET_NAME]
    assert secrets_with_values([{**placeholder, "stringData": {},
                                 "data": {"CQ_API_KEY_PEPPER": "UkVQTEFDRV9NRQ=="}}]) == [
        SECRET_NAME]


def test_dev_generates_its_own_secret_with_the_database_url_and_pepper() -> None:
    dev = render("dev")
    secret = one(dev, "Secret")
    assert secret["metadata"]["name"] == SECRET_NAME
    assert set(secret["data"]) == SECRET_KEYS
    assert secret_references(dev) == {SECRET_NAME}
    for docs in (dev, render("prod")):
        assert not SECRET_KEYS & set(one(docs, "ConfigMap")["data"])


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
    # Named after the release (the image tag), a valid name, and bounded in time.
    tag = migrate["image"].rsplit(":", 1)[1]
    assert job["metadata"]["name"] == f"computequote-migrate-{tag}"
    assert DNS_LABEL.fullmatch(job["metadata"]["name"])
    assert 0 < job["spec"]["activeDeadlineSeconds"] <= 3600
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    annotations = job["metadata"]["annotations"]
    assert annotations["argocd.argoproj.io/hook"] == "Sync"
    assert int(annotations["argocd.argoproj.io/sync-wave"]) < 0
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


# Two releases in a row, applied without a cluster.

IMMUTABLE = {"Job": ("spec.selector", "spec.template"), "Deployment": ("spec.selector",)}
"""Fields the API server refuses to change on an existing object (a subset of its validation:
the ones these manifests could trip over)."""


class ImmutableFieldError(Exception):
    """What ``kubectl apply`` reports as ``<field>: Invalid value: ...: field is immutable``."""


def _field(doc: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        doc = doc.get(part, {})
    return doc


class ApiServer:
    """Objects by (kind, namespace, name), applied as ``kubectl apply`` does: a new name is
    created, a known one is updated in place unless an immutable field changes."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}

    def apply(self, docs: list[dict[str, Any]]) -> None:
        for doc in docs:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
            meta = doc["metadata"]
            key = (doc["kind"], meta.get("namespace", ""), meta["name"])
            live = self.objects.get(key)
            if live is not None:
                for path in IMMUTABLE.get(doc["kind"], ()):
                    if _field(live, path) != _field(doc, path):
                        raise ImmutableFieldError(f"{doc['kind']}/{meta['name']}: {path}: "
                                                  "field is immutable")
            self.objects[key] = copy.deepcopy(doc)


def render_release(tmp_path: Path, tag: str) -> list[dict[str, Any]]:
    """The prod overlay as a release bumps it: a copy of deploy/k8s with ``newTag: tag``."""
    k8s = tmp_path / tag / "k8s"
    shutil.copytree(DEPLOY / "k8s", k8s)
    overlay = k8s / "overlays" / "prod" / "kustomization.yaml"
    text, count = re.subn(r'newTag: "[^"]*"', f'newTag: "{tag}"', overlay.read_text())
    assert count == 1
    overlay.write_text(text)
    rendered = kustomize("prod", k8s)
    if rendered is None:
        pytest.skip("no kubectl with kustomize here: releases cannot be rendered")
    return [d for d in yaml.safe_load_all(rendered) if d]


def _names(docs: list[dict[str, Any]]) -> dict[str, set[str]]:
    names: dict[str, set[str]] = {}
    for doc in docs:
        names.setdefault(doc["kind"], set()).add(doc["metadata"]["name"])
    return names


def test_two_releases_apply_in_order(tmp_path: Path) -> None:
    """Issue 18: the second release's apply failed (the Job's template is immutable)."""
    first, second = render_release(tmp_path, "0.1.0"), render_release(tmp_path, "0.2.0")
    first_names, second_names = _names(first), _names(second)
    assert first_names.pop("Job") == {"computequote-migrate-0.1.0"}
    assert second_names.pop("Job") == {"computequote-migrate-0.2.0"}
    assert first_names == second_names  # everything else is updated in place
    server = ApiServer()
    server.apply(first)
    server.apply(second)
    server.apply(second)  # applying a release again changes nothing
    jobs = sorted(name for kind, _, name in server.objects if kind == "Job")
    assert jobs == ["computequote-migrate-0.1.0", "computequote-migrate-0.2.0"]
    image = _field(server.objects[("Deployment", "computequote", "computequote")],
                   "spec.template.spec.containers")[0]["image"]
    assert image == "registry.example.com/computequote:0.2.0"


def test_the_stand_in_refuses_a_changed_job_under_one_name(tmp_path: Path) -> None:
    """With the old fixed name, the second release fails as it did on a cluster."""
    first, second = render_release(tmp_path, "0.1.0"), render_release(tmp_path, "0.2.0")
    fixed_name = copy.deepcopy(second)
    one(fixed_name, "Job")["metadata"]["name"] = one(first, "Job")["metadata"]["name"]
    server = ApiServer()
    server.apply(first)
    with pytest.raises(ImmutableFieldError, match=r"spec\.template: field is immutable"):
        server.apply(fixed_name)


# Behind an ingress: trusted proxies (issue 41).

def forwarded_allow_ips(docs: list[dict[str, Any]]) -> str:
    config = next(d for d in docs if d["kind"] == "ConfigMap"
                  and d["metadata"]["name"].startswith("computequote-config"))
    return str(config["data"]["FORWARDED_ALLOW_IPS"])


def test_only_named_proxies_are_trusted_and_prod_trusts_its_ingress_network() -> None:
    import ipaddress

    assert '"--proxy-headers"' in (DEPLOY / "Dockerfile").read_text()
    assert forwarded_allow_ips(render("dev")) == "127.0.0.1,::1"
    prod = forwarded_allow_ips(render("prod"))
    networks = [ipaddress.ip_network(part.strip()) for part in prod.split(",")]
    assert networks
    assert all(n.is_private and n.prefixlen >= 8 for n in networks)
    assert "*" not in prod


def test_the_access_log_names_the_client_behind_a_trusted_proxy_only(tmp_path: Path) -> None:
    """uvicorn's ProxyHeadersMiddleware with prod's FORWARDED_ALLOW_IPS, around this app: a
    request relayed by a pod of the ingress network is logged with the client's address (the
    right-most untrusted one, so a forged left-most entry is ignored); the same header from an
    address outside it is not believed."""
    import asyncio
    import json
    import logging

    from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

    from service.api.observability import JsonFormatter
    from service.main import create_app, dispose
    from service.settings import Settings

    app = create_app(Settings(database_url=f"sqlite:///{tmp_path}/x.sqlite3", warm_up=False,
                              search_workers=0))
    wrapped = ProxyHeadersMiddleware(app,  # type: ignore[arg-type]
                                     trusted_hosts=forwarded_allow_ips(render("prod")))

    async def get(peer: str, forwarded: str) -> None:
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "GET", "scheme": "http", "path": "/livez", "raw_path": b"/livez",
                 "query_string": b"", "root_path": "", "server": ("10.244.0.10", 8000),
                 "client": (peer, 40000),
                 "headers": [(b"host", b"computequote"),
                             (b"x-forwarded-for", forwarded.encode())]}
        messages = iter([{"type": "http.request", "body": b"", "more_body": False}])

        async def receive() -> dict[str, Any]:
            return next(messages, {"type": "http.disconnect"})

        async def send(_: dict[str, Any]) -> None:
            return None

        await wrapped(scope, receive, send)  # type: ignore[arg-type]

    # A handler of the test's own on the access logger, with the service's JSON formatter:
    # the service's stdout handler holds whichever sys.stdout the process had when an earlier
    # test first configured logging, which capsys does not see (CI, stop 47).
    lines: list[dict[str, Any]] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(json.loads(JsonFormatter().format(record)))

    access, collect = logging.getLogger("service.access"), Collect()
    access.addHandler(collect)
    try:
        asyncio.run(get("10.244.3.7", "6.6.6.6, 198.51.100.7"))
        asyncio.run(get("192.0.2.50", "198.51.100.8"))
    finally:
        access.removeHandler(collect)
        dispose(app)
    assert [line["client"] for line in lines] == ["198.51.100.7", "192.0.2.50"]


def test_the_optional_samples_validate_and_select_the_api_pods() -> None:
    """deploy/k8s/optional: the Ingress pair validates strictly; /ui goes through the auth
    proxy and the API paths do not; the PodMonitor (a CRD, so checked by shape) scrapes the
    API pods' /metrics on the named port the Deployment declares."""
    ingresses = list(yaml.safe_load_all((DEPLOY / "k8s/optional/ingress.yaml").read_text()))
    for doc in ingresses:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    by_name = {d["metadata"]["name"]: d for d in ingresses}
    portal, api = by_name["computequote-portal"], by_name["computequote-api"]
    assert "nginx.ingress.kubernetes.io/auth-url" in portal["metadata"]["annotations"]
    assert "nginx.ingress.kubernetes.io/auth-url" not in api["metadata"]["annotations"]
    portal_paths = {p["path"] for r in portal["spec"]["rules"] for p in r["http"]["paths"]}
    api_paths = {p["path"] for r in api["spec"]["rules"] for p in r["http"]["paths"]}
    assert portal_paths == {"/ui"}
    assert "/ui" not in api_paths
    assert "/v1" in api_paths
    monitor = yaml.safe_load((DEPLOY / "k8s/optional/podmonitor.yaml").read_text())
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["kind"] == "PodMonitor"
    deployment = one(render("prod"), "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    ports = {p["name"] for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert endpoint["port"] in ports
    assert endpoint["path"] == "/metrics"
    spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in spread} == {"topology.kubernetes.io/zone",
                                                  "kubernetes.io/hostname"}
    assert all(c["labelSelector"]["matchLabels"].items() <= pod_labels.items() for c in spread)


def test_compose_publishes_on_loopback_only_and_documents_the_first_key() -> None:
    text = (DEPLOY / "compose.yaml").read_text()
    ports = yaml.safe_load(text)["services"]["app"]["ports"]
    assert ports == ["127.0.0.1:8000:8000"]
    assert "run --rm app cq keys create" in text


def test_the_skypilot_refresh_cronjobs_cover_aws_gcp_and_lambda_with_real_commands() -> None:
    """deploy/k8s/optional/price-refresh-skypilot-cronjobs.yaml (issue 41): one CronJob per
    cloud of SkyPilot's catalogue, schema-valid, each a command the CLI accepts, held for
    review on big moves, and not all at the same minute."""
    from typer.testing import CliRunner

    from service.cli import app

    path = DEPLOY / "k8s/optional/price-refresh-skypilot-cronjobs.yaml"
    jobs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    help_text = CliRunner().invoke(app, ["catalog", "refresh", "--help"],
                                   env={"COLUMNS": "200"}).output
    clouds = []
    for doc in jobs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        assert doc["spec"]["concurrencyPolicy"] == "Forbid"
        command = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0][
            "command"]
        assert command[:3] == ["cq", "catalog", "refresh"]
        assert command[command.index("--format") + 1] == "skypilot"
        assert "--hold-on-moves" in command
        for option in (c for c in command[3:] if c.startswith("--")):
            assert option in help_text, option
        clouds.append(command[command.index("--provider") + 1])
    assert sorted(clouds) == ["aws", "gcp", "lambda"]
    assert len({d["spec"]["schedule"] for d in jobs}) == len(jobs)
