# LLMFleet — `make help` lists the targets.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
export PATH := /usr/local/go/bin:$(HOME)/go/bin:$(PATH)

VENV      := .venv
PY        := $(VENV)/bin/python
PIP_STAMP := $(VENV)/.installed
TOOLS     := dev/localcluster/build-tools.sh
LOCALCLUSTER := PYTHONPATH=dev $(PY) -m localcluster
KUBECTL    = $$($(TOOLS) --bindir kubernetes)/kubectl
HELM       = $$($(TOOLS) --bindir helm)/helm
PYTEST_ARGS ?=
# make test and make e2e: pytest-xdist workers, each with a lab of its own (tests/workers.py); 0: one
# process, as before.
TEST_WORKERS ?= 4
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(PIP_STAMP): operator/pyproject.toml operator/requirements.lock
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check pip==25.3
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r operator/requirements.lock
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -e operator
	touch $@

.PHONY: venv
venv: $(PIP_STAMP) ## Create the Python virtualenv with the pinned dependencies

# The Debian package the tests use, pinned, for its promtool (the alert rules' tests); the
# Prometheus that scrapes the engines is built by build-tools.sh (make tools), the same version.
DEB_PACKAGES := prometheus=2.42.0+ds-5+deb12u1
# What builds and runs the images without Docker (dev/images): buildah builds, mmdebstrap makes
# the stand-in base, umoci unpacks an image for crun to run.
IMAGE_DEB_PACKAGES := buildah=1.28.2+ds1-3+deb12u1+b3 mmdebstrap=1.3.5-7 umoci=0.4.7+ds-3+b7 \
  crun=1.8.1-1+deb12u1

# $(call apt-pinned,PACKAGE=VERSION ...): install them unless every one is at its version.
define apt-pinned
	@for p in $(1); do \
	  if [ "$$(dpkg-query -W -f='$${Version}' $${p%%=*} 2>/dev/null)" != "$${p#*=}" ]; then missing=1; fi; \
	done; \
	if [ -n "$${missing:-}" ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(1); \
	fi
endef

.PHONY: debian-deps
debian-deps: ## Install the pinned Debian package that gives the tests promtool (prometheus) if missing
	$(call apt-pinned,$(DEB_PACKAGES))

.PHONY: images-deps
images-deps: ## Install the pinned Debian packages that build images without Docker (buildah, mmdebstrap, umoci, crun) if missing
	$(call apt-pinned,$(IMAGE_DEB_PACKAGES))

# Without a Docker daemon the images are built with the Debian packages above.
NEED_IMAGE_DEPS = docker info >/dev/null 2>&1 || $(MAKE) --no-print-directory images-deps

.PHONY: images
images: ## Build the operator and router images into OCI archives in build/images (Docker if its daemon answers, else buildah; images/README.md)
	@$(NEED_IMAGE_DEPS)
	dev/images/build.sh

.PHONY: tools
tools: ## Build the pinned cluster and metrics components (etcd, kubernetes, kwok, lws, keda, helm, prometheus, adapter, kube-state-metrics)
	$(TOOLS)

.PHONY: vllm
vllm: ## Install the pinned vLLM CPU build (its own virtualenv in ~/.cache/llmfleet) and the tiny test model
	dev/dataplane/install-vllm.sh

# The flags the planner lets spec.engine.extraArgs set: vLLM's own `vllm serve` parser, read in the
# pinned vLLM's virtualenv (the chart's engine image runs the same version).
ENGINE_FLAGS := operator/src/llmfleet/planner/vllm_flags.json

.PHONY: engine-flags
engine-flags: vllm ## Regenerate the planner's table of vLLM's flags (planner/vllm_flags.json) from the pinned vLLM's parser
	"$$(dev/dataplane/install-vllm.sh)/bin/python" dev/dataplane/engine_flags.py table > $(ENGINE_FLAGS).tmp
	mv $(ENGINE_FLAGS).tmp $(ENGINE_FLAGS)

.PHONY: dashboards
dashboards: venv ## Generate the Grafana dashboards (charts/llmfleet/dashboards) from code
	PYTHONPATH=dev $(PY) -m dashboards --output-dir charts/llmfleet/dashboards

.PHONY: settings-table
settings-table: venv ## Rewrite the table of the operator's settings (docs/operator.md) from their definition (llmfleet/settings.py)
	$(PY) -m llmfleet.settings docs/operator.md

.PHONY: lint
lint: venv ## ruff (lint + format check) and mypy --strict
	cd operator && ../$(VENV)/bin/ruff check src ../tests ../dev ../bench
	cd operator && ../$(VENV)/bin/ruff format --check src ../tests ../dev ../bench
	cd operator && ../$(VENV)/bin/mypy src ../dev/localcluster ../dev/dashboards ../dev/gpulab

.PHONY: fmt
fmt: venv ## Format the Python code
	cd operator && ../$(VENV)/bin/ruff format src ../tests ../dev ../bench && ../$(VENV)/bin/ruff check --fix src ../tests ../dev ../bench

.PHONY: crds
crds: venv ## Generate the CRDs from the pydantic models: the chart's templates (charts/llmfleet/templates/crds) and the plain ones (crds/, applied without Helm)
	$(VENV)/bin/llmfleet crds --output-dir charts/llmfleet/templates/crds
	$(VENV)/bin/llmfleet crds --plain --output-dir crds

.PHONY: unit
unit: venv ## Unit tests only (no cluster)
	$(VENV)/bin/pytest tests/unit $(PYTEST_ARGS)

.PHONY: lab
lab: venv ## The lab's own tests (dev/: the node runner, the engine stand-in, the supervisor, kwok's gate); make test runs them, make check does not
	$(VENV)/bin/pytest tests/lab $(PYTEST_ARGS)

.PHONY: check
check: lint ## The quick tiers (minutes): lint, unit tests and the API tier (the API server alone, the operator in process; tests/README.md)
	$(VENV)/bin/pytest tests/unit tests/api $(PYTEST_ARGS)

.PHONY: e2e
e2e: venv tools debian-deps vllm ## The cluster tiers: end-to-end tests on the local cluster (kwok GPU nodes, the node runner's vLLM, metrics), the operator image
	@$(NEED_IMAGE_DEPS)
	$(VENV)/bin/pytest tests/e2e $(XDIST) $(PYTEST_ARGS)

.PHONY: test
test: lint tools debian-deps vllm ## Everything CI runs: lint, unit, API, the lab's own and end-to-end tests on the local cluster, the operator image
	@$(NEED_IMAGE_DEPS)
	$(VENV)/bin/pytest tests $(XDIST) $(PYTEST_ARGS)

.PHONY: fuzz
fuzz: venv tools ## 1,000 generated LLMDeployments against the local cluster and the operator
	LLMFLEET_FUZZ_EXAMPLES=1000 $(VENV)/bin/pytest tests/e2e/test_fuzz.py -s $(PYTEST_ARGS)

.PHONY: cluster-up
cluster-up: venv tools ## Start the local cluster (etcd, apiserver, controller-manager, scheduler, kwok GPU nodes, LeaderWorkerSet, KEDA)
	$(LOCALCLUSTER) up

.PHONY: cluster-down
cluster-down: venv ## Stop the local cluster; no process is left behind
	$(LOCALCLUSTER) down

.PHONY: cluster-wipe
cluster-wipe: venv ## Stop the local cluster and delete its state
	$(LOCALCLUSTER) wipe

.PHONY: demo
demo: cluster-up vllm images ## Local cluster + chart (its operator pod from the built image) + metrics stack + examples (Available) + plans + a real vLLM answering
	$(LOCALCLUSTER).demo

.PHONY: bench
bench: venv tools ## Run every benchmark (or BENCH="name ..."); writes bench/results.json, bench/README.md's table and README.md's headline figures
	PYTHONPATH=dev:. $(PY) -m bench.run $(BENCH)

.PHONY: bench-tables
bench-tables: venv ## Rewrite bench/README.md's table and README.md's headline figures from bench/results.json (runs no benchmark)
	PYTHONPATH=dev:. $(PY) -m bench.run --table-only

.PHONY: lock
lock: ## Re-pin operator/requirements.lock from operator/pyproject.toml
	rm -rf /tmp/llmfleet-lock && python3 -m venv /tmp/llmfleet-lock
	/tmp/llmfleet-lock/bin/pip install --quiet pip==25.3 && /tmp/llmfleet-lock/bin/pip install --quiet -e 'operator[dev]'
	{ echo "# Every Python package of the operator and its tooling, pinned (pip freeze of 'pip install -e operator[dev]')."; \
	  echo "# Regenerate with: make lock"; /tmp/llmfleet-lock/bin/pip freeze --exclude-editable; } > operator/requirements.lock
