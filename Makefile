# benchgate: every target sets itself up (a .venv with pinned installs) on a fresh machine.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt
# Two install levels: what a run needs (`make bench`), and the test and lint tools on top (`make test`).
STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
ARGS ?=
IMAGE_REPOSITORY ?= ghcr.io/benchgate/bench
# The controller image the Helm chart (charts/benchgate) deploys.
OPERATOR_IMAGE_REPOSITORY ?= ghcr.io/benchgate/operator
UI_PORT ?= 5000
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' src/benchgate/_version.py)
# COMMIT and BRANCH reach the CLI through the environment, never through the recipe's shell text:
# `make submit COMMIT='$$(touch x)'` must be rejected as a bad SHA, not run.
export BENCHGATE_COMMIT := $(value COMMIT)
export BENCHGATE_SUBMIT_BRANCH := $(value BRANCH)
# SUITE too: a suite file's path is data (`make submit SUITE=suite.toml`).
export BENCHGATE_SUBMIT_SUITE := $(value SUITE)

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

# torch goes in first, exactly pinned, and from the index of the build this machine runs: on Linux the
# default index (PyPI) serves torch==2.13.0 as the CUDA build (~2.6 GB with its nvidia-* wheels) whether
# or not there is a GPU. Without a GPU (no NVIDIA driver and no nvidia-smi, as measure/launch.py decides)
# it is 2.13.0+cpu from the PyTorch CPU index (~190 MB). The fallback, where that index cannot be reached
# (a machine that reaches only a PyPI mirror) or has no +cpu wheel for this platform (macOS, whose PyPI
# wheel is the CPU build), is torch==2.13.0 from the default index: a CPU wheel where that index or pip's
# find-links serve one, else the CUDA build, which runs on CPU as well; the install says which it got.
# TORCH_CPU_INDEX=URL names a mirror of the CPU index; TORCH_BUILD=cpu or cuda overrides the detection.
TORCH_VERSION := 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_BUILD ?= $(if $(wildcard /proc/driver/nvidia)$(shell command -v nvidia-smi 2>/dev/null),cuda,cpu)
# How torch-install runs pip: tests/docs/test_torch_install.py makes it a metadata-only dry run.
TORCH_PIP ?= $(PIP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	@$(MAKE) --no-print-directory torch-install
	$(PIP) -e .
	@# Which build it got, read after the install of benchgate, which must have kept it.
	@$(PY) -c 'import torch; print(torch.__version__, torch.version.cuda or "")' | { read -r version cuda; \
	  if [ -n "$$cuda" ] && [ "$(TORCH_BUILD)" = cpu ]; then \
	    echo "make: torch $$version is the CUDA $$cuda build (it runs on CPU too); for the CPU build reach $(TORCH_CPU_INDEX) or a mirror of it (TORCH_CPU_INDEX=URL) and rebuild $(VENV)" >&2; \
	  else echo "make: torch $$version"; fi; }
	touch $(STAMP)

# The torch step of the install above (see TORCH_BUILD); not a target to call by hand.
torch-install:
	@if [ "$(TORCH_BUILD)" = cpu ]; then \
	  echo "make: no GPU here: torch $(TORCH_VERSION)+cpu from $(TORCH_CPU_INDEX)"; \
	  $(TORCH_PIP) --retries 1 --index-url $(TORCH_CPU_INDEX) torch==$(TORCH_VERSION)+cpu && exit 0; \
	  echo "make: $(TORCH_CPU_INDEX) is unreachable or has no torch $(TORCH_VERSION)+cpu for this platform: torch==$(TORCH_VERSION) from the default index instead" >&2; \
	fi; \
	$(TORCH_PIP) torch==$(TORCH_VERSION)

$(DEV_STAMP): $(STAMP)
	$(PIP) -e '.[dev]'
	touch $(DEV_STAMP)

install: $(DEV_STAMP) ## Create .venv and install benchgate with pinned dependencies and the dev tools

bench: $(STAMP) ## Run the gate locally on CPU (extra flags: make bench ARGS='--steps 100')
	@# The exit code is the verdict (CI relies on it): say what 1 and 4 mean before make's "Error N".
	@$(VENV)/bin/benchgate run $(ARGS); code=$$?; \
	case $$code in \
	  1) echo "make bench: exit 1 is the verdict FAIL: a regression (the table above shows which check)" >&2 ;; \
	  4) echo "make bench: exit 4 is the verdict UNKNOWN: the timing was not resolved; the 'next:' lines above say what decides it" >&2 ;; \
	esac; exit $$code

# Most tests wait on processes, servers and timeouts, so TEST_WORKERS of them run at once (pytest-xdist),
# a file's tests on one worker (their shared fixtures, a gate run or a server, start once), with a
# longer hang guard: beside three busy workers a gate run takes two to three times its quiet time (the
# six-run suite test 253 s alone, 701 s there). The tests marked serial time real steps against each
# other (A/B verdicts, noise figures) or bound a wall-clock wait, so a neighbour's load would be part of
# their figures: they run afterwards, one at a time, as a gate run would. Exit 5 is pytest's "nothing
# selected" (ARGS naming only tests of one phase); both phases run, and a failure of either fails make.
TEST_WORKERS ?= 4
test: $(DEV_STAMP) ## Run the test suite: all but the serial tests on 4 workers, then the serial ones (A/B timing) one at a time
	@parallel=0; serial=0; \
	$(PY) -m pytest -m "not serial" -n $(TEST_WORKERS) --dist loadfile --timeout 900 $(ARGS) || parallel=$$?; \
	$(PY) -m pytest -m serial $(ARGS) || serial=$$?; \
	for code in $$parallel $$serial; do if [ $$code -ne 0 ] && [ $$code -ne 5 ]; then exit $$code; fi; done; \
	if [ $$parallel -eq 5 ] && [ $$serial -eq 5 ]; then exit 5; fi

test-fast: $(DEV_STAMP) ## The tests not marked slow (no whole gate runs), on 4 workers: the inner loop
	$(PY) -m pytest -m "not slow" -n $(TEST_WORKERS) $(ARGS)

lint: $(DEV_STAMP) ## ruff, mypy and the import layer rules (lint-imports; docs/architecture.md)
	$(VENV)/bin/ruff check src tests benchmarks scripts
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

compile: $(STAMP) ## Compile pipelines/*.yaml, components/*.yaml and the chart's CRDs (committed; tests check them)
	PYTHONHASHSEED=0 BENCHGATE_IMAGE_REPOSITORY=$(IMAGE_REPOSITORY) $(VENV)/bin/benchgate compile

submit: $(STAMP) ## Run the pipeline on KFP for COMMIT=<sha> [BRANCH=main] [SUITE=suite.toml] and exit with its verdict (KFP_HOST, KFP_TOKEN)
	$(VENV)/bin/benchgate submit --commit "$$BENCHGATE_COMMIT" --branch "$$BENCHGATE_SUBMIT_BRANCH" \
		$${BENCHGATE_SUBMIT_SUITE:+--suite "$$BENCHGATE_SUBMIT_SUITE"} $(ARGS)

images: ## Build the bench and operator images (needs a Docker engine)
	@# `docker info` rather than only the CLI: a docker client without a running engine cannot build.
	@{ command -v docker && docker info; } >/dev/null 2>&1 || { echo "make images: no Docker engine here; build images/bench/Dockerfile and images/operator/Dockerfile where a Docker engine runs" >&2; exit 2; }
	docker build -f images/bench/Dockerfile -t $(IMAGE_REPOSITORY):$(VERSION) .
	docker build -f images/operator/Dockerfile -t $(OPERATOR_IMAGE_REPOSITORY):$(VERSION) .

ui: $(STAMP) ## Open the MLflow UI on the local store (runs table: Experiments > benchgate); UI_PORT=5000
	@echo "MLflow UI: http://127.0.0.1:$(UI_PORT)/#/experiments  (open 'benchgate': the runs table)"
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(VENV)/bin/mlflow ui --backend-store-uri "sqlite:///$(CURDIR)/.benchgate/mlflow/mlflow.db" --host 127.0.0.1 --port $(UI_PORT) --workers 1

shard: $(STAMP) ## Regenerate the bundled eval shard from its seed
	$(PY) scripts/make_shard.py

benchmarks: $(DEV_STAMP) ## Measure benchgate itself (overhead, noise, false alarms, wall time, kfp.local, faults)
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/noise.py
	$(PY) benchmarks/power.py noise
	$(PY) benchmarks/wall_time.py
	$(PY) benchmarks/kfp_overhead.py
	$(PY) benchmarks/faults.py

# The GPU check runs on a lent GPU machine as it comes: its own python3 and torch, no network, no .venv.
# What benchgate's measuring layers need beyond such a machine (pydantic, at constraints.txt's pins)
# travels as wheels in .whl/, fetched here beforehand; pass `carry: [".whl"]` to the machine.
GPU_PYTHON ?= python3
GPU_CHECK_OUT ?= gpu-check-out
GPU_WHEELS := pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5

gpu-check-wheels: ## Fetch the wheels `make gpu-check` needs on a GPU machine without network into .whl/ (Python 3.12)
	$(PYTHON) -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
		--python-version 3.12 --implementation cp --platform manylinux_2_17_x86_64 \
		--platform manylinux2014_x86_64 -d .whl $(GPU_WHEELS)

gpu-check: ## On a GPU machine: benchmarks/gpu_check.py with that machine's own torch (< 8 min; GPU_CHECK_OUT=dir)
	@$(GPU_PYTHON) -c "import pydantic" 2>/dev/null || \
		$(GPU_PYTHON) -m pip install --quiet --no-index --no-deps --target .gpu-site .whl/*.whl
	PYTHONPATH=$(CURDIR)/src:$(CURDIR)/.gpu-site PYTHONUNBUFFERED=1 \
		$(GPU_PYTHON) benchmarks/gpu_check.py --out $(GPU_CHECK_OUT) $(ARGS)

clean: ## Remove results and caches (keeps .venv and baselines)
	rm -rf benchgate-out .pytest_cache .mypy_cache .ruff_cache

.PHONY: torch-install help install bench test test-fast lint compile submit images ui shard benchmarks gpu-check gpu-check-wheels clean
