# Strongroom — `make help` lists the targets. The README's two commands are `make serve` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch; on this machine kind pip finds it on local disk. GPU hosts: see README.
TORCH_SPEC ?= torch==2.13.0
PYTEST_WORKERS ?= 2

.PHONY: help install system-deps services serve lint typecheck test test-fast bench-gateway clean

help:  ## show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed  ## create .venv with strongroom and its test dependencies

system-deps:  ## Debian packages the tests use (SoftHSM2, Chromium)
	@scripts/system-deps.sh

services:  ## make sure Redis and PostgreSQL answer on 127.0.0.1
	@scripts/services.sh

serve: install  ## start the gateway and its engine with embedded defaults on 127.0.0.1:8000
	$(VENV)/bin/strongroom serve

lint: install  ## ruff
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install  ## mypy (strict on gateway, policies, filters, keys, audit, strongroom)
	$(VENV)/bin/mypy

test: install system-deps services lint typecheck  ## lint, type-check and run the whole test suite
	OMP_NUM_THREADS=1 $(VENV)/bin/pytest -n $(PYTEST_WORKERS) -q

test-fast: install  ## the test suite without lint or type checks
	OMP_NUM_THREADS=1 $(VENV)/bin/pytest -n $(PYTEST_WORKERS) -q -x

bench-gateway: install  ## gateway overhead benchmark (stub engine), results into bench/results/
	$(VENV)/bin/strongroom bench gateway

clean:  ## remove the venv and caches (keeps ./data)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
