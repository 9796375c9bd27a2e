# tpcmesh: `make help` lists every target.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST := $(VENV)/bin/pytest
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.DEFAULT_GOAL := help

.PHONY: help
help: ## List every target
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  \033[1m%-18s\033[0m %s\n", $$1, $$2}'

.PHONY: setup
setup: ## Install everything: Debian packages (as root), the virtualenv, the dashboard's assets
	@hack/setup.sh

.PHONY: control-plane
control-plane: ## Build (once, cached in ~/.cache/tpcmesh) the control plane, kubelet, kube-proxy, CoreDNS, pause, helm, kube-network-policies
	@tests/cluster/build-control-plane.sh >/dev/null
	@tests/cluster/build-network-policies.sh >/dev/null

.PHONY: demo
demo: setup ## Run a measured mesh on this machine (local agents, dashboard on SQLite); Ctrl-C ends it
	$(VENV)/bin/tpcmesh-local demo

.PHONY: test
test: setup control-plane ## Run every test: unit, integration, cluster (real nodes too), browser, e2e
	$(PYTEST) tests --junitxml=artifacts/junit.xml

N ?= 3
LOAD ?= 2
.PHONY: test-repeat
test-repeat: setup ## Find flakes: the modules that start real servers, N rounds (N=3) beside LOAD busy processes (LOAD=2); MODULES="..." to choose
	$(PY) hack/test_repeat.py --times $(N) --load $(LOAD) $(MODULES)

.PHONY: test-netpol
test-netpol: setup control-plane ## Only the chart's NetworkPolicies enforced on the real 3-node cluster (root; part of `make test`)
	$(PYTEST) tests/cluster/test_network_policy.py

.PHONY: test-upgrade
test-upgrade: setup control-plane ## Only the helm upgrade from an earlier commit (its images built once, cached) while a run is in flight, on the real 3-node cluster (root; part of `make test`)
	$(PYTEST) tests/cluster/test_real_cluster_upgrade.py

.PHONY: test-unit
test-unit: setup ## Run the fast unit tests only
	$(PYTEST) tests/unit

.PHONY: lint
lint: setup ## ruff and mypy
	$(VENV)/bin/ruff check agent operator lab dashboard tests
	$(VENV)/bin/mypy agent/tpcmesh_agent operator/tpcmesh_operator lab/tpcmesh_lab

.PHONY: bench
bench: bench-movers bench-dashboard bench-planner bench-fidelity bench-changes bench-advice bench-loss bench-partitions ## Run every benchmark; results go to BENCHMARKS.md

# ---- lab (lab/, tpcmesh-local): the WAN lab, the local mode, benches ----
.PHONY: bench-planner
bench-planner: setup ## Mesh planner: planning time and rounds vs the lower bound for 10, 100, 1000 agents
	$(PY) -m tpcmesh_lab.bench planner --output BENCHMARKS.md

.PHONY: bench-loss
bench-loss: setup ## Loss mesh at 100 agents, one run: an agent's probe CPU at 10 and 100 peers on loopback, then the archive's summary ingest rate (and server CPU) and the 100 × 100 loss grid p95 on PostgreSQL
	$(PY) dashboard/bench/bench_loss.py

.PHONY: bench-partitions
bench-partitions: setup ## Partitioned archive (PostgreSQL): the in-place upgrade of 1 M unpartitioned measurements and the drop of the old table, with how long a reader and a writer were blocked
	$(PY) dashboard/bench/bench_partitions.py

LOSS ?= 0.01
.PHONY: bench-loss-window
bench-loss-window: setup ## Loss mesh (root): the loss reported over a long window on a lossy lab link vs its binomial interval (LOSS=0.01 percent; 1 h 55 min at 10 packets/s)
	$(PY) -m tpcmesh_lab.lossbench window --loss $(LOSS) --output BENCHMARKS.md

.PHONY: bench-fidelity
bench-fidelity: setup ## WAN lab fidelity (root): iperf3 vs the built-in mover and the RTT probe on 500 Mbit/s, 20 ms; round policies on a shared uplink
	$(VENV)/bin/tpcmesh-local bench-fidelity --output BENCHMARKS.md

.PHONY: bench-diagnosis
bench-diagnosis: setup ## Limit model on injected faults (root): each cause on pairs of one WAN-lab mesh, iperf3 at 1 and 8 streams, a confusion matrix
	$(VENV)/bin/tpcmesh-local bench-diagnosis

.PHONY: local-cleanup
local-cleanup: ## Remove network namespaces and devices left behind by killed local runs
	$(VENV)/bin/tpcmesh-local cleanup

# --- Chart, manifests and images (issue 6: charts/, manifests/install.yaml + rbac/, Dockerfiles/) -----------
K8S_BIN = $$(tests/cluster/build-control-plane.sh)
IMAGE_REGISTRY ?= ghcr.io/tpcmesh
IMAGE_TAG ?= $$(sed -n 's/^appVersion: *"\(.*\)"/\1/p' charts/tpcmesh/Chart.yaml)

.PHONY: version
version: ## Print the one version (the chart's appVersion); VERSION=x.y.z writes it into the chart and the packages
	@if [ -n "$(VERSION)" ]; then python3 hack/version.py set "$(VERSION)" && python3 hack/version.py check; \
	  else python3 hack/version.py; fi

.PHONY: protocols
protocols: setup ## Write every protocol list (CRD, schemas, chart, each package's protocols.py) from manifests/protocols.yaml
	$(PY) hack/protocols.py

.PHONY: grafana
grafana: setup ## Write the chart's Grafana dashboards (charts/tpcmesh/dashboards/*.json) with grafana-foundation-sdk
	$(PY) hack/grafana.py

.PHONY: chart
chart: setup control-plane protocols grafana ## Copy manifests/crds into the chart, write its dashboards, lint it and package it into dist/
	@rm -f charts/tpcmesh/crds/*.yaml && cp manifests/crds/*.yaml charts/tpcmesh/crds/
	@helm="$(K8S_BIN)/helm"; $$helm lint --strict charts/tpcmesh --kube-version 1.34.4 && \
	  for v in charts/tpcmesh/ci/*-values.yaml; do $$helm lint --strict charts/tpcmesh --kube-version 1.34.4 -f $$v >/dev/null || exit 1; done && \
	  mkdir -p dist && $$helm package charts/tpcmesh --destination dist

.PHONY: manifests
manifests: chart ## Regenerate manifests/install.yaml and manifests/rbac/ from the chart
	$(PY) hack/render_manifests.py "$(K8S_BIN)/helm"

.PHONY: images
images: ## Build the operator, agent and dashboard images (docker, else buildah: no engine needed; cached)
	@IMAGE_REGISTRY="$(IMAGE_REGISTRY)" IMAGE_TAG="$(IMAGE_TAG)" hack/build-images.sh >/dev/null

.PHONY: cluster
cluster: setup control-plane images ## A real 3-node Kubernetes cluster on this machine (root; Ctrl-C ends it)
	$(VENV)/bin/tpcmesh-local cluster up

.PHONY: cluster-demo
cluster-demo: setup control-plane images ## The real cluster + the chart + PostgreSQL + the quick benchmark; prints the grid URL
	$(VENV)/bin/tpcmesh-local cluster demo

.PHONY: cluster-down
cluster-down: ## Stop `make cluster` and remove what a killed one left behind
	$(VENV)/bin/tpcmesh-local cluster down

# --- operator -------------------------------------------------------------------------------------------------------
.PHONY: test-operator
test-operator: setup ## The operator's unit, integration and cluster tests
	$(PYTEST) tests/unit/operator tests/integration/operator tests/cluster/test_operator_crds.py tests/cluster/test_operator_run.py

# --- dashboard ------------------------------------------------------------------------------------------------------
SCALE ?= 1
SCALES ?= 0.1,3
CLUSTERS ?= 10
.PHONY: bench-changes
bench-changes: setup ## Change detection on synthetic histories: steps found, false changes per 100 runs
	$(PY) dashboard/bench/bench_changes.py

.PHONY: bench-advice
bench-advice: setup ## Advice per link: runs the optimize rule needs to reach the known optimum of synthetic links
	$(PY) dashboard/bench/bench_advice.py

.PHONY: bench-dashboard
bench-dashboard: setup ## Dashboard: grid/history latency and ingest rate on ~7 M measurements (SCALE; the 7-day median grid at SCALES too), with the loss mesh delivering; then a federation of CLUSTERS clusters at scale 0.1 (CLUSTERS=1: not)
	$(PY) dashboard/bench/bench_dashboard.py --scale $(SCALE) $(if $(SCALES),--scales $(SCALES))
	$(if $(filter-out 1,$(CLUSTERS)),$(PY) dashboard/bench/bench_dashboard.py --scale 0.1 --clusters $(CLUSTERS) --baseline "")

.PHONY: dashboard-run
dashboard-run: setup ## Run the dashboard on http://127.0.0.1:8000 (SQLite file unless DATABASE_URL is set)
	@# A throw-away secret key unless one is exported (sign-ins then last as long as this server).
	cd dashboard && ../$(PY) manage.py migrate && \
	  TPCMESH_DASHBOARD_SECRET_KEY="$${TPCMESH_DASHBOARD_SECRET_KEY:-$$(../$(PY) -c 'import secrets; print(secrets.token_urlsafe(50))')}" \
	  ../$(PY) manage.py runserver 127.0.0.1:8000

.PHONY: test-dashboard
test-dashboard: setup ## The dashboard's unit, integration and browser tests, and its migrations check
	cd dashboard && ../$(PY) manage.py makemigrations --check --dry-run
	$(PYTEST) tests/unit/dashboard tests/integration/dashboard tests/browser/test_grid.py

# --- agent core (control API, file sets, runner, built-in mover) ----------------------------------------------------
.PHONY: test-agent
test-agent: setup ## The agent's unit and integration tests (real agents on 127.0.1.x)
	$(PYTEST) tests/unit/agent tests/integration/agent

# ---- agent movers (issue 2, part B: protocol servers and external movers) ----
.PHONY: bench-movers
bench-movers: setup ## Movers over loopback: iperf3, cp, built-in, XRootD HTTP-TPC/root://, GridFTP; XRootD HTTP-TPC token vs x509 vs none, agent vs curl (QUICK=1: smoke run; ONLY=movers|auth|disk: one table; disk: built-in, XRootD and GridFTP disk→disk vs fio ceilings)
	$(PY) agent/bench/movers.py $(if $(QUICK),--quick) $(if $(ONLY),--only $(ONLY)) --output BENCHMARKS.md

# --- docs -------------------------------------------------------------------------------------------------------
.PHONY: readme-picture
readme-picture: setup ## Refresh docs/grid.png (the README's picture) from the browser test's grid screenshot
	$(PYTEST) -q tests/browser/test_grid.py -k colours
	mkdir -p docs && cp artifacts/grid.png docs/grid.png
