# `make images`: the trainer (CPU variant), orchestrator and mlflow images, plus the stand-ins of the managed
# services the local cluster needs (postgres, s3), built with podman (images/build.sh). Each is tagged
# localhost/parathink/NAME:<package version>, :<git commit> and :latest; one line per image gives its ID, digest,
# size and build time. Where no registry can be reached (this machine), the Python base and the official Airflow
# image are offline stand-ins (images/offline/). Layers are cached in podman's store (/var/lib/containers),
# outside the checkout: a machine builds them once, a later `make images` rebuilds only what changed.
# `make image-trainer-cuda`: the CUDA trainer from the same Python base (torch's PyPI wheel brings CUDA and NCCL),
# then its check inside the image (images/trainer/check.sh: bench-results/trainer_cuda_image.json). Not part of
# `make images` or CI: ~10 GB of wheels (docs/deploy.md gives its size and build time).

IMAGES ?= trainer-cpu orchestrator mlflow postgres s3
# runc and explicit ulimits (images/offline/containers.conf says why); every podman call of make reads it.
export CONTAINERS_CONF := $(CURDIR)/images/offline/containers.conf
PODMAN_PACKAGES := podman buildah runc fuse-overlayfs slirp4netns uidmap mmdebstrap

.PHONY: images image-trainer-cuda podman

images: podman
	nice -n 10 bash images/build.sh $(IMAGES)

image-trainer-cuda: podman
	nice -n 10 bash images/build.sh trainer
	bash images/trainer/check.sh localhost/parathink/trainer:$$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)

podman:
	@command -v podman >/dev/null && command -v mmdebstrap >/dev/null || { $(call APT_INSTALL,$(PODMAN_PACKAGES)); }

# tests/e2e runs them (test_images_built.py: tagged, no pip configuration in a layer, mlflow's default command;
# the cluster tests: mk/cluster.mk). `make test E2E=0` leaves tests/e2e and its builds out (cold, `make images` is
# about 21 minutes on 2 busy cores: docs/deploy.md), for a machine that cannot spend them; CI runs them.
E2E ?= 1
ifneq ($(E2E),0)
TEST_DEPS += images
else
PYTEST_ARGS += --ignore=tests/e2e
endif
