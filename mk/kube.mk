# A real Kubernetes for tests/deploy and the local cluster (mk/cluster.mk): kube-apiserver, kube-scheduler,
# kube-controller-manager, kubelet and kube-proxy 1.20 built from Debian's source with Debian's Go 1.19
# (tests/deploy/build_control_plane.sh says why), the pause binary from the same source, etcd from Debian's
# etcd-server. The binaries are cached outside the checkout, so a machine builds them once (16.5 minutes on
# 2 busy cores, 2026-12-03); every later `make test` finds them. The tests read KUBE_HOME's bin/ through
# PARATHINK_KUBE_BIN.

KUBE_HOME  ?= $(HOME)/.cache/parathink/kube-1.20
KUBE_STAMP := $(KUBE_HOME)/bin/.built-1.20.2-go1.19-reflect2-node
export PARATHINK_KUBE_BIN := $(KUBE_HOME)/bin

.PHONY: kube-control-plane

kube-control-plane: $(KUBE_STAMP)

# The stamp names the Kubernetes version: an edit of this file does not rebuild for minutes. etcd is checked on
# every run because a cached bin/ can outlive the Debian package on a reused machine.
$(KUBE_STAMP):
	nice -n 10 bash tests/deploy/build_control_plane.sh $(KUBE_HOME)
	touch $@

kube-control-plane: | etcd-server
.PHONY: etcd-server
etcd-server:
	@command -v etcd >/dev/null || { $(call APT_INSTALL,etcd-server); }

TEST_DEPS += kube-control-plane
