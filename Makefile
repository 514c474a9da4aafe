# The two commands: `make run` (the whole system, on embedded Redis/PostgreSQL when none is
# configured, then the ingestion demo: a sample knowledge base ingested and searched) and
# `make test` (lint and import contracts, types, the whole suite on real Redis and PostgreSQL).
# Both do all set-up on a fresh machine: virtualenv, install, services.

PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# Three pytest-xdist processes, a test module's tests in one of them: each module gets its own
# migrated database from a template and each test its own Redis namespace and free ports, so
# modules never see each other's rows (6 to 8 minutes on 2 cores, against 18 in one process).
# `make test PYTEST_ARGS=` runs them in one process.
PYTEST_ARGS ?= -n 3 --dist loadfile

.PHONY: run test lint typecheck pytest bench chaos chaos-quick services install clean docs \
	docs-build reference image
# The package version (setup.cfg): `speedtier --version`, the chart's appVersion, the image tag.
VERSION := $(shell sed -n 's/^version = //p' setup.cfg)

$(STAMP): setup.cfg pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found (Python 3.11 is required)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dev,docs]'
	touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/speedtier up --demo

services:
	bash scripts/ensure-services.sh
	bash scripts/ensure-browser.sh
	bash scripts/ensure-promtool.sh
	bash scripts/ensure-ruby.sh

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/hadolint Dockerfile

typecheck: install
	$(BIN)/mypy

pytest: install services
	$(BIN)/pytest $(PYTEST_ARGS)

# The chaos suite's bounded subset: real workers, faults injected, every figure must be 0.
chaos-quick: install services
	$(BIN)/python -m bench.chaos --quick

# The documentation site: `make docs` serves it with live reload on http://127.0.0.1:8000;
# `make docs-build` builds it strictly (a broken link or anchor, a page missing from the nav,
# a snippet whose file is gone fail), offline, in a few seconds.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

docs-build: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site

# The files generated from the code: the reference pages (CLI, settings, HTTP API, families,
# queues, ticks) and each tier's queue list in the chart's values.yaml;
# tests/integration/docs/test_reference_pages.py fails while they differ from what this writes.
reference: install
	$(BIN)/python -m scripts.gen_reference

image:
	docker build --build-arg VERSION=$(VERSION) -t speedtier:$(VERSION) .

test: lint typecheck docs-build pytest chaos-quick

bench: install services
	bash scripts/ensure-wrk.sh
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache *.egg-info

chaos: install services
	$(BIN)/python -m bench.chaos
