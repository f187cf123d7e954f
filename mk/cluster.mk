# `make kube-up` / `make kube-down`: a real single-node Kubernetes on this machine (tests/e2e/local_cluster.py):
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy 1.20 (mk/kube.mk builds
# them once per machine), containerd 1.6 + runc + Debian's CNI plugins, the images of `make images` imported, the
# chart installed in namespace parathink with stand-ins for Postgres and S3. `kube-up` is idempotent and prints the
# admin kubeconfig's path on its last line; `kube-down` stops what it started, by PID, and removes its mounts,
# bridge (ptk0) and iptables chains. State: KUBE_CLUSTER_DIR (containerd's image store survives kube-down).

KUBE_CLUSTER_DIR ?= $(HOME)/.cache/parathink/cluster
export PARATHINK_CLUSTER_DIR := $(KUBE_CLUSTER_DIR)
NODE_PACKAGES := containerd runc containernetworking-plugins iptables conntrack
IMAGES_VERSION = $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
# What the cluster runs: the stage pods' trainer, MLflow, and the two stand-ins.
CLUSTER_IMAGES = $(foreach i,trainer-cpu mlflow postgres-offline s3-offline,localhost/parathink/$(i):$(IMAGES_VERSION))

.PHONY: kube-up kube-down node-packages

kube-up: $(STAMP) kube-control-plane node-packages images
	@$(PY) tests/e2e/local_cluster.py up $(CLUSTER_IMAGES)

kube-down: $(STAMP)
	$(PY) tests/e2e/local_cluster.py down

node-packages:
	@command -v containerd >/dev/null && test -x /usr/lib/cni/bridge && command -v conntrack >/dev/null || { \
		$(call APT_INSTALL,$(NODE_PACKAGES)); }

# tests/e2e's cluster fixture starts the cluster itself (and stops it if it started it): it needs the binaries
# (kube-control-plane, already in TEST_DEPS), containerd and the CNI plugins, and the images (mk/images.mk).
ifneq ($(E2E),0)
TEST_DEPS += node-packages
endif
