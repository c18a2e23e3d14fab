# Container targets; included by the top-level Makefile (which defines VENV).
# Every step installs its own prerequisites, so `make image && make sif` works on a fresh
# Debian host with no container registry (see containers/README.md).

VENV ?= .venv
CONTAINER_PYTHON ?= python3
BUILDTOOL := $(CONTAINER_PYTHON) containers/buildtool.py
# VARIANT=cpu (default; tensorflow-cpu) or gpu (tensorflow[and-cuda] with NVIDIA's CUDA wheels):
# lock, wheelhouse, image and sif build that variant, from the same Dockerfile and .def.
VARIANT ?= cpu
ifeq ($(filter $(VARIANT),cpu gpu),)
$(error VARIANT=$(VARIANT) is not a variant of the image: use VARIANT=cpu (the default) or VARIANT=gpu)
endif
# Tag of the TensorFlow image; TFSLURM_BASE_IMAGE is used when present or pullable,
# otherwise the debootstrapped tfslurm/debian-base:bookworm (make base-image) replaces it.
ifeq ($(VARIANT),gpu)
TFSLURM_IMAGE ?= tf-slurm:gpu
TFSLURM_SIF ?= tf-slurm-gpu.sif
else
TFSLURM_IMAGE ?= tf-slurm:latest
TFSLURM_SIF ?= tf-slurm.sif
endif
# The GPU variant's, for the targets that build or test it next to the default one.
TFSLURM_GPU_IMAGE ?= tf-slurm:gpu
TFSLURM_GPU_SIF ?= tf-slurm-gpu.sif
TFSLURM_BASE_IMAGE ?= python:3.11-slim-bookworm
SUITE ?= bookworm
# squashfs options of the SIF (empty: buildtool.py's default, -comp lz4 -Xhc -b 128K; see
# containers/README.md), e.g. SIF_MKSQUASHFS_ARGS='-comp gzip' for Apptainer's own default.
SIF_MKSQUASHFS_ARGS ?=
CONTAINER_TEST_ARGS ?=
# The container tests run on two pytest-xdist workers: most of their time is Docker and
# Apptainer starting containers (38 -> 28 s here, on 2 cores).
CONTAINER_WORKERS ?= 2

.PHONY: docker-engine base-image lock wheelhouse image apptainer-builder sif ch-image oci-bundle docker-archive image-gpu sif-gpu \
	test-container test-image-gpu test-container-gpu clean-containers

docker-engine: ## install (apt) and start a Docker engine unless one answers
	@containers/ensure-docker.sh

base-image: docker-engine ## debootstrap + docker import a Debian base image (SUITE=bookworm; FORCE=1 rebuilds)
	@$(BUILDTOOL) base-image --suite $(SUITE) $(if $(FORCE),--force)

lock: ## re-resolve containers/requirements[-gpu].in into its .lock (hashes, needs PyPI; VARIANT=gpu)
	@$(BUILDTOOL) lock --variant $(VARIANT)

wheelhouse: ## download the locked wheels (hash-checked) and build this repo's wheel into containers/wheelhouse[-gpu]
	@$(BUILDTOOL) wheelhouse --variant $(VARIANT)

# Built only when its inputs changed (the Dockerfile, the lock, the package, the base image:
# compared by content with a label on the image); then the wheelhouse is filled first.
image: docker-engine ## build the TensorFlow image if its inputs changed (VARIANT=gpu: tf-slurm:gpu; FORCE=1 rebuilds)
	@$(BUILDTOOL) image --variant $(VARIANT) --tag $(TFSLURM_IMAGE) --base $(TFSLURM_BASE_IMAGE) \
		$(if $(FORCE),--force)

apptainer-builder: docker-engine ## build the Debian trixie + Apptainer image that builds and runs the SIF
	@$(BUILDTOOL) builder

# Depends on image so an edited tfslurm_entry/ reaches the SIF; rebuilt only when the image's
# id, the .def or the squashfs options changed (containers/build/<sif>.inputs records them).
sif: image ## build tf-slurm.sif from the image with apptainer if the image changed (VARIANT=gpu: tf-slurm-gpu.sif); FORCE=1 rebuilds
	@$(BUILDTOOL) sif --variant $(VARIANT) --tag $(TFSLURM_IMAGE) --output $(TFSLURM_SIF) \
		$(if $(FORCE),--force) $(if $(SIF_MKSQUASHFS_ARGS),--mksquashfs-args '$(SIF_MKSQUASHFS_ARGS)')

# Charliecloud's form of the image (ch-run takes a directory: docs/runtimes.md), rebuilt only
# when the image's id changed.
ch-image: image ## tf-slurm.ch.tar for Charliecloud's ch-run: the image's files and its ENV in ch/environment (unpack it into a directory)
	@$(BUILDTOOL) ch-image --tag $(TFSLURM_IMAGE) $(if $(FORCE),--force)

# Slurm's OCI form (srun --container=BUNDLE: docs/runtimes.md): config.json and rootfs/, rebuilt
# only when the image's id or OCI_BINDS changed. OCI_BINDS: the site's shared file systems, bound
# into every task (the node's /dev, /sys, /tmp and its host names always are).
OCI_BINDS ?= /home
oci-bundle: image ## tf-slurm.oci.tar, an OCI bundle for Slurm's srun --container (OCI_BINDS='/home /shared': the site paths every task sees)
	@$(BUILDTOOL) oci-bundle --tag $(TFSLURM_IMAGE) $(foreach b,$(OCI_BINDS),--bind $(b)) $(if $(FORCE),--force)

# The Docker image as one file (docker save), for the runtimes that load it: Podman, enroot.
docker-archive: image ## tf-slurm.docker.tar, the image as docker save writes it (podman load -i; then enroot import podman://)
	@$(BUILDTOOL) docker-archive --tag $(TFSLURM_IMAGE) $(if $(FORCE),--force)

image-gpu: ## the GPU (CUDA) image tf-slurm:gpu: same as make image VARIANT=gpu
	@$(MAKE) --no-print-directory image VARIANT=gpu TFSLURM_IMAGE=$(TFSLURM_GPU_IMAGE)

sif-gpu: ## the GPU SIF tf-slurm-gpu.sif: same as make sif VARIANT=gpu
	@$(MAKE) --no-print-directory sif VARIANT=gpu TFSLURM_IMAGE=$(TFSLURM_GPU_IMAGE) \
		TFSLURM_SIF=$(TFSLURM_GPU_SIF)

# Builds what the tests need first: a few seconds when nothing changed (see image and sif).
test-container: $(VENV)/.installed docker-engine image sif apptainer-builder ## run the container tests (pytest -m container tests/container)
	TFSLURM_IMAGE=$(TFSLURM_IMAGE) TFSLURM_SIF=$(TFSLURM_SIF) \
		$(VENV)/bin/python -m pytest -m container -n $(CONTAINER_WORKERS) tests/container $(JUNIT) \
		$(CONTAINER_TEST_ARGS)

# The GPU image's tests that need no SIF: part of make test (the GPU SIF takes ~9 minutes).
test-image-gpu: $(VENV)/.installed docker-engine image image-gpu ## build the GPU image, run its tests that need no SIF (every CUDA library loads; runs on the CPU and says so)
	TFSLURM_IMAGE=$(TFSLURM_IMAGE) TFSLURM_GPU_IMAGE=$(TFSLURM_GPU_IMAGE) \
		$(VENV)/bin/python -m pytest -m "container_gpu and not gpu_sif" tests/container $(JUNIT) \
		$(CONTAINER_TEST_ARGS)

# The GPU variant's tests need no GPU: the CUDA build must run on the CPU and say so.
test-container-gpu: $(VENV)/.installed docker-engine image sif apptainer-builder sif-gpu ## build the GPU image and SIF, run their tests (pytest -m container_gpu)
	TFSLURM_IMAGE=$(TFSLURM_IMAGE) TFSLURM_GPU_IMAGE=$(TFSLURM_GPU_IMAGE) \
		TFSLURM_GPU_SIF=$(TFSLURM_GPU_SIF) \
		$(VENV)/bin/python -m pytest -m container_gpu tests/container $(CONTAINER_TEST_ARGS)

clean-containers: ## remove the wheelhouses, build leftovers and both SIFs (images stay)
	rm -rf containers/wheelhouse containers/wheelhouse-gpu containers/build $(TFSLURM_SIF) \
		$(TFSLURM_GPU_SIF)
