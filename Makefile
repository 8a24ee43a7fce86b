# Strongroom — `make help` lists the targets. The README's two commands are `make serve` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0
# cpu (the default: no multi-GB CUDA download), or a CUDA build of the PyTorch index on GPU hosts
# (TORCH_VARIANT=cu128). Where that index is unreachable (a mirror, a local wheel folder that
# pip.conf names), --retries 0 lets pip move on to the other sources at once.
TORCH_VARIANT ?= cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/$(TORCH_VARIANT)
TORCH_SPEC ?= torch==$(TORCH_VERSION)+$(TORCH_VARIANT)
TORCH_PIP_ARGS ?= --extra-index-url $(TORCH_INDEX) --retries 0
# `make wheelhouse` collects every wheel here; `make install-offline` installs them into PREFIX.
# The wheels fit the Python that built them: install-offline with the same version (PYTHON).
WHEELHOUSE ?= wheelhouse
PREFIX ?= /opt/strongroom
PYTHON ?= python3
PYTEST_WORKERS ?= 2

.PHONY: help install system-deps services serve lint typecheck test test-fast bench-gateway clean \
	wheelhouse install-offline k8s-manifests

help:  ## show this help
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)" $(TORCH_PIP_ARGS)
	$(PY) -m pip install -q -e '.[test]'
	touch $@

install: $(VENV)/.installed  ## create .venv with strongroom and its test dependencies

system-deps:  ## Debian packages the tests use (SoftHSM2, Chromium)
	@scripts/system-deps.sh

services:  ## make sure Redis and PostgreSQL answer on 127.0.0.1
	@scripts/services.sh

serve: install  ## start the gateway and its engine with embedded defaults on 127.0.0.1:8000
	$(VENV)/bin/strongroom serve

lint: install  ## ruff, and the import layers between packages (import-linter, pyproject.toml)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

typecheck: install  ## mypy (strict on gateway, policies, filters, keys, audit, strongroom)
	$(VENV)/bin/mypy

test: install system-deps services lint typecheck  ## lint, type-check and run the whole test suite
	OMP_NUM_THREADS=1 $(VENV)/bin/pytest -n $(PYTEST_WORKERS) -q

test-fast: install  ## the test suite without lint or type checks
	OMP_NUM_THREADS=1 $(VENV)/bin/pytest -n $(PYTEST_WORKERS) -q -x

bench-gateway: install  ## gateway overhead benchmark (stub engine), results into bench/results/
	$(VENV)/bin/strongroom bench gateway

wheelhouse: install  ## every wheel of an install into $(WHEELHOUSE)/ with hash-pinned requirements.txt
	rm -rf $(WHEELHOUSE) && mkdir -p $(WHEELHOUSE)
	echo "torch==$(TORCH_VERSION)+$(TORCH_VARIANT)" > $(WHEELHOUSE)/constraints.txt
	$(PY) -m pip wheel -q -w $(WHEELHOUSE) -c $(WHEELHOUSE)/constraints.txt $(TORCH_PIP_ARGS) .
	$(PY) scripts/wheelhouse_requirements.py $(WHEELHOUSE) > $(WHEELHOUSE)/requirements.tmp
	mv $(WHEELHOUSE)/requirements.tmp $(WHEELHOUSE)/requirements.txt
	@echo "copy $(WHEELHOUSE)/ to the offline host, then: make install-offline WHEELHOUSE=... PREFIX=..."

install-offline:  ## install strongroom into $(PREFIX) from $(WHEELHOUSE)/ alone (--no-index, hashes checked)
	test -f $(WHEELHOUSE)/requirements.txt || { echo "no $(WHEELHOUSE)/requirements.txt: make wheelhouse first"; exit 1; }
	$(PYTHON) -m venv $(PREFIX)
	PIP_CONFIG_FILE=/dev/null $(PREFIX)/bin/pip install -q --no-index --find-links $(WHEELHOUSE) \
		--require-hashes -r $(WHEELHOUSE)/requirements.txt
	$(PREFIX)/bin/strongroom --help >/dev/null && echo "installed: $(PREFIX)/bin/strongroom"

k8s-manifests: install  ## re-render deploy/kubernetes/strongroom.yaml from the Helm chart
	$(PY) scripts/render_kubernetes.py

clean:  ## remove the venv and caches (keeps ./data)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
