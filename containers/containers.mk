# Container targets; included by the top-level Makefile (which defines VENV).
# Every step installs its own prerequisites, so `make image && make sif` works on a fresh
# Debian host with no container registry (see containers/README.md).

VENV ?= .venv
CONTAINER_PYTHON ?= python3
BUILDTOOL := $(CONTAINER_PYTHON) containers/buildtool.py
# Tag of the TensorFlow image; TF_SLURM_BASE_IMAGE is used when present or pullable,
# otherwise the debootstrapped tfslurm/debian-base:bookworm (make base-image) replaces it.
TF_SLURM_IMAGE ?= tf-slurm:latest
TF_SLURM_BASE_IMAGE ?= python:3.11-slim-bookworm
TF_SLURM_SIF ?= tf-slurm.sif
SUITE ?= bookworm
# squashfs options of the SIF (empty: buildtool.py's default, -comp lz4 -Xhc -b 128K; see
# containers/README.md), e.g. SIF_MKSQUASHFS_ARGS='-comp gzip' for Apptainer's own default.
SIF_MKSQUASHFS_ARGS ?=
CONTAINER_TEST_ARGS ?=

.PHONY: docker-engine base-image lock wheelhouse image apptainer-builder sif test-container clean-containers

docker-engine: ## install (apt) and start a Docker engine unless one answers
	@containers/ensure-docker.sh

base-image: docker-engine ## debootstrap + docker import a Debian base image (SUITE=bookworm; FORCE=1 rebuilds)
	@$(BUILDTOOL) base-image --suite $(SUITE) $(if $(FORCE),--force)

lock: ## re-resolve containers/requirements.in into containers/requirements.lock (hashes, needs PyPI)
	@$(BUILDTOOL) lock

wheelhouse: ## download the locked wheels (hash-checked) and build this repo's wheel into containers/wheelhouse
	@$(BUILDTOOL) wheelhouse

image: docker-engine wheelhouse ## build the TensorFlow image (debootstrapped base if TF_SLURM_BASE_IMAGE cannot be pulled)
	@$(BUILDTOOL) image --tag $(TF_SLURM_IMAGE) --base $(TF_SLURM_BASE_IMAGE)

apptainer-builder: docker-engine ## build the Debian trixie + Apptainer image that builds and runs the SIF
	@$(BUILDTOOL) builder

# Depends on image so an edited tfslurm_entry/ reaches the SIF; unchanged sources hit Docker's
# layer cache and leave the image (and so the SIF) as they were.
sif: image ## build tf-slurm.sif from the image with apptainer (in a builder container if the host has none); FORCE=1 rebuilds
	@$(BUILDTOOL) sif --tag $(TF_SLURM_IMAGE) --output $(TF_SLURM_SIF) $(if $(FORCE),--force) \
		$(if $(SIF_MKSQUASHFS_ARGS),--mksquashfs-args '$(SIF_MKSQUASHFS_ARGS)')

# Builds what the tests need first: cheap when nothing changed (docker layer cache; the SIF
# is rebuilt only when it is older than the image).
test-container: $(VENV)/.installed docker-engine image sif apptainer-builder ## run the container tests (pytest -m container tests/container)
	TF_SLURM_IMAGE=$(TF_SLURM_IMAGE) TF_SLURM_SIF=$(TF_SLURM_SIF) \
		$(VENV)/bin/python -m pytest -m container tests/container $(CONTAINER_TEST_ARGS)

clean-containers: ## remove the wheelhouse, build leftovers and tf-slurm.sif (images stay)
	rm -rf containers/wheelhouse containers/build $(TF_SLURM_SIF)
