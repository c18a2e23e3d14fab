# tf-slurm kit: every user-facing action is a make target; `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST := $(PY) -m pytest
# Each test layer writes its JUnit report here; `make test` reads them for its closing table.
REPORTS := build/test-reports
JUNIT = --junitxml=$(REPORTS)/$@.xml

# One prefix for every variable, TFSLURM_: the old TF_SLURM_* names of make's variables still
# work for now, each saying its new name once.
RENAMED := IMAGE SIF GPU_IMAGE GPU_SIF BASE_IMAGE BUILDER DEBIAN_ARCHIVE GPU_PYTHON
$(foreach v,$(RENAMED),$(if $(filter-out undefined,$(origin TF_SLURM_$(v))),\
	$(warning TF_SLURM_$(v) is now TFSLURM_$(v); it still works for now: rename it)\
	$(eval TFSLURM_$(v) := $(TF_SLURM_$(v)))$(eval export TFSLURM_$(v))))

.PHONY: help docs venv lock-venv venv-gpu demo demo-ps demo-het cifar10-sample local-demo test check lint format test-unit test-integration test-gpu test-e2e test-soak dev-cluster \
	dev-cluster-down dev-cluster-images prerequisites builds test-slurm-versions capture-slurm-env dev-shell deploy-dev bench bench-smoke bench-gpu bench-resolve clean

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_.-]+:.*?## ' $(MAKEFILE_LIST) | sort \
		| awk 'BEGIN {FS = ":.*?## "}; {printf "  %-18s %s\n", $$1, $$2}'

# The venv installs from hashed pins, as the images do: the image's set (requirements.lock:
# tensorflow-cpu, tf-keras...) and the tools (requirements-venv.lock), both for CPython 3.11.
VENV_LOCKS := containers/requirements.lock containers/requirements-venv.lock
PIP_QUIET := -q --disable-pip-version-check

$(VENV)/.installed: pyproject.toml $(VENV_LOCKS)
	@if ! $(PYTHON) -c 'import ensurepip, venv' 2>/dev/null; then \
		echo "== installing python3-venv (apt-get)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null; \
	fi
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || { \
		echo "make venv: $(PYTHON) is Python $$($(PYTHON) -c 'import platform; print(platform.python_version())'), but the locks are for 3.11 (Debian bookworm's python3): run make venv PYTHON=python3.11, or pip install -e '.[tf,test,deploy,bench]' into a venv of your own" >&2; exit 2; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "== installing the locked TensorFlow and test tools (hashes checked), then tfslurm-entry, into $(VENV)"
	@$(PY) -m pip install $(PIP_QUIET) --no-deps --require-hashes $(addprefix -r ,$(VENV_LOCKS))
	@$(PY) -m pip install $(PIP_QUIET) --no-deps --no-build-isolation -e .
	@touch $@

venv: $(VENV)/.installed ## create ./.venv with tfslurm-entry, TensorFlow and the test tools (hashed pins)

lock-venv: ## re-resolve containers/requirements-venv.in into its .lock (needs PyPI)
	@$(CONTAINER_PYTHON) containers/buildtool.py lock-venv

DEVCLUSTER := python3 slurm-dev-cluster/devcluster.py
# SLURM=22.05|24.11|26.05: the dev cluster's Slurm (Debian bookworm's, trixie's, sid's packages);
# each release is its own compose project (tfslurm-dev for 24.11, tfslurm-slurm2205, ...).
SLURM ?= 24.11
SLURM_VERSIONS := 22.05 24.11 26.05
export TFSLURM_SLURM := $(SLURM)
DEMO_STEPS ?= 300

demo: ## the main job: distributed CIFAR-10 (2 nodes x 2 tasks) on the Slurm dev cluster
	@$(MAKE) --no-print-directory builds
	@$(MAKE) --no-print-directory cifar10-sample
	$(DEVCLUSTER) submit /data/examples/cifar10/multi-worker.sbatch --steps $(DEMO_STEPS)

# From a bare machine: the apt steps first, one at a time (dpkg has one lock), then what does
# not depend on each other side by side (the TensorFlow image; the SIF builder and the cluster's
# node and MariaDB images; the venv), then the SIF. Much of it waits on the network and the
# disk: make demo from a bare machine took 6 min 03 s so, 8 min 50 s one step at a time here
# (docs/dev-cluster.md); make test's first layer is this too.
builds: ## build what make demo and make test use, side by side where they do not depend on each other: the venv, the image and its SIF, the dev cluster's images
	@$(MAKE) --no-print-directory prerequisites
	@$(MAKE) --no-print-directory -j3 image dev-cluster-images $(VENV)/.installed
	@$(MAKE) --no-print-directory sif

prerequisites: docker-engine ## install (apt) the Docker engine, debootstrap and python3-venv where missing
	@$(BUILDTOOL) prerequisites

demo-ps: cifar10-sample ## the same job with ParameterServerStrategy (chief, 1 ps, 2 workers)
	$(DEVCLUSTER) submit /data/examples/cifar10/parameter-server.sbatch --steps $(DEMO_STEPS)

demo-het: cifar10-sample ## parameter-server as a heterogeneous job: chief + ps on a CPU node, workers on 2 GPU nodes
	$(DEVCLUSTER) submit /data/examples/cifar10/heterogeneous.sbatch --steps $(DEMO_STEPS)

cifar10-sample: dev-cluster ## write a learnable sample in CIFAR-10's binary format to /data/cifar10
	$(DEVCLUSTER) sample /data/cifar10

local-demo: $(VENV)/.installed ## a 4-task multi-worker step on localhost with fake Slurm variables
	$(PY) examples/local_demo/run.py --tasks 4 --steps 30

# test-image-gpu: the GPU image is built when its inputs changed and its tests that need no SIF
# run; the GPU SIF (about 9 minutes on 2 cores, squashing 6 GB) and its tests (make
# test-container-gpu) would take the suite past its 30 minutes.
TEST_LAYERS := builds lint test-unit test-integration test-gpu test-container test-image-gpu test-e2e
test: ## run the test suite's layers (what .ci/run runs; test-soak, test-slurm-versions and test-container-gpu are outside it); ends with each layer's wall time, peak disk use and the slowest tests
	@$(PYTHON) tests/suite.py $(TEST_LAYERS)

# The contributor's quick answer: what needs no Docker (1 min 50 s here, on 2 cores).
check: ## lint, unit and integration tests only: no Docker, no cluster (a few minutes)
	@$(PYTHON) tests/suite.py lint test-unit test-integration

docs: $(VENV)/.installed ## write the README's and docs' generated parts from the code: the options table, the --explain and error examples
	$(PY) -m tests.docs --write

# The shell scripts shellcheck reads: tfslurm-run and the others the kit ships or runs.
SHELL_SCRIPTS = $(shell git ls-files '*.sh' '*.sbatch' tfslurm_entry/launcher/tfslurm-run .ci/run \
	containers/apptainer/as-user)

lint: $(VENV)/.installed ## ruff check and format check (no line kept out of the formatter); shellcheck on the shell scripts; ansible-lint (production profile) on playbooks/
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@! git grep -n -E '# fmt: (skip|off)' -- '*.py' ':!tests/user_programs' || \
		{ echo "lint: the lines above keep code out of the formatter: remove the comment, make format"; exit 1; }
	$(VENV)/bin/shellcheck $(SHELL_SCRIPTS)
	cd playbooks && PATH="$(abspath $(VENV))/bin:$$PATH" ansible-lint

format: $(VENV)/.installed ## reformat the code with ruff
	$(VENV)/bin/ruff format .

# The unit and integration tests run on pytest-xdist workers (0: in pytest's own process).
# Most of their time is waiting (timeouts played out, a chief working on alone), so more
# workers than cores pay: on 2 cores, unit 81 -> 28 s with 4, integration 137 -> 80 s with 3
# (4 gains nothing more: TensorFlow's processes then share the cores). The unit tests' slow
# ones (real entrypoints) sit together in a few modules: --dist worksteal hands a worker that
# is done the others' queued tests, where the default left one worker with the whole chain
# (on 2 cores, 2026-11-28: 52 -> 43 s).
UNIT_WORKERS ?= 6
INTEGRATION_WORKERS ?= 3
test-unit: $(VENV)/.installed ## unit and property tests (fake Slurm variables, no TensorFlow)
	$(PYTEST) -q -n $(UNIT_WORKERS) --dist worksteal tests/unit $(JUNIT)

test-integration: $(VENV)/.installed ## real TensorFlow processes on localhost, both strategies
	$(PYTEST) -q -n $(INTEGRATION_WORKERS) -m "integration and not soak" tests/integration $(JUNIT)

# On a GPU node: TensorFlow on the GPU runs in .venv-gpu (make venv-gpu) and in tf-slurm-gpu.sif
# (make sif-gpu) where present (TFSLURM_GPU_PYTHON, TFSLURM_GPU_SIF name others); each test
# says why it is skipped where one is missing. Without a GPU every test is skipped.
test-gpu: $(VENV)/.installed ## on a GPU node: GPU detection and narrowing, TensorFlow on the GPU (venv-gpu, GPU SIF)
	$(PYTEST) -q -rs -m gpu tests/gpu $(JUNIT)

# WHEELS=DIR installs offline from a folder of the locked wheels (make wheelhouse VARIANT=gpu
# leaves them in containers/wheelhouse-gpu/pypi; any Python the lock has wheels for).
venv-gpu: ## .venv-gpu: TensorFlow's CUDA build from containers/requirements-gpu.lock (hashes checked), for make test-gpu
	@test -x .venv-gpu/bin/python || $(PYTHON) -m venv .venv-gpu
	.venv-gpu/bin/python -m pip install -q --disable-pip-version-check --require-hashes --no-deps \
		$(if $(WHEELS),--no-index --find-links $(WHEELS)) -r containers/requirements-gpu.lock

# The e2e cases run side by side on pytest-xdist workers, each on a dev cluster of its own
# (tests/e2e/conftest.py: the first on tfslurm-dev, worker N on tfslurm-dev-wN); a module whose
# cases share a fixture, or that trains CIFAR-10 hard, runs on one worker (its xdist_group).
# On 2 cores the cases share the CPU more than they wait: 3 workers took a warm layer from
# 17 min 34 s to 13 min 07 s (tests/README.md).
E2E_WORKERS ?= 3
# The OCI bundle the dev cluster's jobs use binds its shared /data too (a prerequisite inherits it).
test-e2e: OCI_BINDS = /home /data
test-e2e: $(VENV)/.installed sif ch-image oci-bundle docker-archive ## end-to-end tests on the Slurm dev cluster (brings it up if needed) and, for Podman, on this machine's own Slurm
	$(PYTEST) -q $(if $(filter-out 0,$(E2E_WORKERS)),-n $(E2E_WORKERS) --dist loadgroup) \
		-m "e2e and not soak" tests $(JUNIT)

# Before calling an issue resolved that touches what they cover: see tests/README.md.
test-soak: OCI_BINDS = /home /data
test-soak: $(VENV)/.installed sif ch-image oci-bundle docker-archive ## repeats, controls, runs at scale and the other cases of one behaviour, not in make test: the tutorials 5 times each, 24 jobs on shared nodes, 128 tasks on 16 nodes, every program with every stop of a job, make bench --smoke
	$(PYTEST) -q -m soak tests $(JUNIT)

# NODES=16: compute nodes c1..c16 (default 3, or as many as the running cluster has).
dev-cluster: sif ## start the Slurm dev cluster (SLURM=22.05|24.11|26.05, NODES=N compute nodes, default 3), wait until idle, install the SIF
	python3 slurm-dev-cluster/devcluster.py up --sif $(TFSLURM_SIF) $(if $(NODES),--nodes $(NODES))

# Slurm 22.05's nodes carry the TensorFlow image's venv (no Apptainer for bookworm).
dev-cluster-images: apptainer-builder $(if $(filter 22.05,$(SLURM)),image) ## build the dev cluster's node and MariaDB images (SLURM=...) without starting it
	@$(DEVCLUSTER) images

dev-cluster-down: ## remove the dev cluster's containers, networks and volumes (SLURM=... picks which)
	python3 slurm-dev-cluster/devcluster.py down

# One release at a time: `up` (which rebuilds a node image older than its inputs, e.g. 22.05's
# venv from tf-slurm:latest, and installs the SIF), the cases, then `down`.
test-slurm-versions: OCI_BINDS = /home /data
test-slurm-versions: $(VENV)/.installed sif oci-bundle ## on each Slurm release (22.05, 24.11, 26.05): its dev cluster, the core e2e cases, down; writes docs/resolution.md's table (~9 min, not in make test)
	@mkdir -p build/slurm-versions
	@for v in $(SLURM_VERSIONS); do \
		echo "== Slurm $$v"; rm -f build/slurm-versions/$$v.xml; \
		TFSLURM_SLURM=$$v $(DEVCLUSTER) up --sif $(TFSLURM_SIF) && \
		TFSLURM_SLURM=$$v $(PYTEST) -q -m slurm_versions tests/e2e/test_slurm_versions.py \
			--junitxml=build/slurm-versions/$$v.xml; \
		TFSLURM_SLURM=$$v $(DEVCLUSTER) down; \
	done
	$(PY) tests/e2e/slurm_matrix.py $(addprefix build/slurm-versions/,$(addsuffix .xml,$(SLURM_VERSIONS)))

capture-slurm-env: dev-cluster ## record what this SLURM release exports into job steps: tests/unit/resolve/data/slurm-$(SLURM).json
	python3 slurm-dev-cluster/capture_env.py

dev-shell: ## a shell on the dev cluster's login node, as the job user
	python3 slurm-dev-cluster/devcluster.py shell

# ANSIBLE_ARGS: more ansible-playbook options, e.g. ANSIBLE_ARGS='--check --diff' or
# ANSIBLE_ARGS='--tags image -e tfslurm_image_rollback_to=VERSION'.
deploy-dev: $(VENV)/.installed dev-cluster ## roll the kit out onto the dev cluster with Ansible (playbooks/site.yml)
	cd playbooks && ANSIBLE_CONFIG=ansible.cfg $(abspath $(VENV))/bin/ansible-playbook \
		-i inventories/dev-cluster site.yml $(ANSIBLE_ARGS)

# BENCH_ARGS: more bench/run.py options, e.g. BENCH_ARGS='--rounds 2 --skip artefacts'.
bench: $(VENV)/.installed cifar10-sample ## measure the kit against its alternatives (16 min on 2 cores on 2026-11-24; each run writes its time): bench/results/<date>.json, docs/benchmarks.md
	$(PY) -m bench.run $(BENCH_ARGS)

bench-smoke: $(VENV)/.installed cifar10-sample ## the benchmark end to end on tiny settings (a few minutes), into bench/results/smoke/
	$(PY) -m bench.run --smoke --results-dir bench/results/smoke --docs-dir bench/results/smoke $(BENCH_ARGS)

# On a GPU node: GPU_PYTHON is a Python whose TensorFlow is the CUDA build (make venv-gpu).
GPU_PYTHON ?= $(or $(TFSLURM_GPU_PYTHON),.venv-gpu/bin/python)
bench-gpu: ## on a GPU node: CIFAR-10 images/s and start-up through the kit versus plain python, into bench/results/gpu-<date>.json (~5 min)
	$(GPU_PYTHON) -m bench.gpu --python $(GPU_PYTHON) --out bench/results/gpu-$$(date -u +%F).json

bench-resolve: $(VENV)/.installed ## time `tfslurm-entry --print-config` for 4096 nodes x 8 tasks
	$(PY) -m bench.resolution

clean: ## remove the venv and caches
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis *.egg-info

include containers/containers.mk
