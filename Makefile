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

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(PIP_STAMP): operator/pyproject.toml operator/requirements.lock
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check pip==25.3
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r operator/requirements.lock
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -e operator
	touch $@

.PHONY: venv
venv: $(PIP_STAMP) ## Create the Python virtualenv with the pinned dependencies

# Debian packages the tests use, pinned (Prometheus scrapes the engines; promtool checks rules).
DEB_PACKAGES := prometheus=2.42.0+ds-5+deb12u1

.PHONY: debian-deps
debian-deps: ## Install the pinned Debian packages (prometheus, promtool) if missing
	@for p in $(DEB_PACKAGES); do \
	  if [ "$$(dpkg-query -W -f='$${Version}' $${p%%=*} 2>/dev/null)" != "$${p#*=}" ]; then missing=1; fi; \
	done; \
	if [ -n "$${missing:-}" ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(DEB_PACKAGES); \
	fi

.PHONY: tools
tools: ## Build the pinned cluster and metrics components (etcd, kubernetes, kwok, lws, keda, helm, prometheus, adapter, kube-state-metrics)
	$(TOOLS)

.PHONY: vllm
vllm: ## Install the pinned vLLM CPU build (its own virtualenv in ~/.cache/llmfleet) and the tiny test model
	dev/dataplane/install-vllm.sh

.PHONY: dashboards
dashboards: venv ## Generate the Grafana dashboards (charts/llmfleet/dashboards) from code
	PYTHONPATH=dev $(PY) -m dashboards --output-dir charts/llmfleet/dashboards

.PHONY: lint
lint: venv ## ruff (lint + format check) and mypy --strict
	cd operator && ../$(VENV)/bin/ruff check src ../tests ../dev ../bench
	cd operator && ../$(VENV)/bin/ruff format --check src ../tests ../dev ../bench
	cd operator && ../$(VENV)/bin/mypy src ../dev/localcluster ../dev/dashboards

.PHONY: fmt
fmt: venv ## Format the Python code
	cd operator && ../$(VENV)/bin/ruff format src ../tests ../dev ../bench && ../$(VENV)/bin/ruff check --fix src ../tests ../dev ../bench

.PHONY: crds
crds: venv ## Generate crds/ from the pydantic models
	$(VENV)/bin/llmfleet crds --output-dir crds

.PHONY: chart-crds
chart-crds: crds ## Copy crds/ into the chart (the chart never holds a hand-made copy)
	mkdir -p charts/llmfleet/crds && cp crds/*.yaml charts/llmfleet/crds/

.PHONY: unit
unit: venv ## Unit tests only (no cluster)
	$(VENV)/bin/pytest tests/unit $(PYTEST_ARGS)

.PHONY: test
test: lint tools debian-deps vllm ## Everything CI runs: lint, unit and end-to-end tests on the local cluster
	$(VENV)/bin/pytest tests $(PYTEST_ARGS)

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
demo: cluster-up vllm ## Local cluster + chart + metrics stack + examples (Available) + plans + a real vLLM answering
	$(LOCALCLUSTER).demo

.PHONY: bench
bench: venv tools ## Run every benchmark; writes bench/results.json and the README table
	PYTHONPATH=dev:. $(PY) -m bench.run $(BENCH)

.PHONY: lock
lock: ## Re-pin operator/requirements.lock from operator/pyproject.toml
	rm -rf /tmp/llmfleet-lock && python3 -m venv /tmp/llmfleet-lock
	/tmp/llmfleet-lock/bin/pip install --quiet pip==25.3 && /tmp/llmfleet-lock/bin/pip install --quiet -e 'operator[dev]'
	{ echo "# Every Python package of the operator and its tooling, pinned (pip freeze of 'pip install -e operator[dev]')."; \
	  echo "# Regenerate with: make lock"; /tmp/llmfleet-lock/bin/pip freeze --exclude-editable; } > operator/requirements.lock
