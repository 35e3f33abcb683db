# benchgate: every target sets itself up (a .venv with pinned installs) on a fresh machine.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt
STAMP := $(VENV)/.installed
ARGS ?=

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	@# torch first and exactly pinned: a looser pin resolves to a ~2.6 GB CUDA build.
	$(PIP) torch==2.13.0
	$(PIP) -e '.[dev]'
	touch $(STAMP)

install: $(STAMP) ## Create .venv and install benchgate with pinned dependencies

bench: $(STAMP) ## Run the gate locally on CPU (extra flags: make bench ARGS='--steps 100')
	$(VENV)/bin/benchgate run $(ARGS)

test: $(STAMP) ## Run the test suite (real torchrun on 2 CPU ranks; no GPU, no cluster)
	$(PY) -m pytest $(ARGS)

lint: $(STAMP) ## ruff and mypy
	$(VENV)/bin/ruff check src tests benchmarks scripts
	$(VENV)/bin/mypy

shard: $(STAMP) ## Regenerate the bundled eval shard from its seed
	$(PY) scripts/make_shard.py

benchmarks: $(STAMP) ## Measure benchgate itself (overhead, noise, false alarms, wall time)
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/noise.py
	$(PY) benchmarks/false_alarms.py
	$(PY) benchmarks/wall_time.py

clean: ## Remove results and caches (keeps .venv and baselines)
	rm -rf benchgate-out .pytest_cache .mypy_cache .ruff_cache

.PHONY: help install bench test lint shard benchmarks clean
