# Kubeflow Pipelines (`parathink kfp`, docs/kubeflow.md). The compiled pipelines are checked in under
# components/snapshots/ so that a change to the pipeline or to a cluster profile shows in review as a YAML diff;
# tests/kfp/test_compile.py compares fresh compiles with them. After an intended change: `make kfp-snapshots`.
# The KFP tests need nothing beyond .venv (kfp, kfp-kubernetes, kubernetes-validate, jsonschema come with the dev
# extra), so this file adds nothing to TEST_DEPS.

.PHONY: kfp-snapshots

kfp-snapshots: $(STAMP)
	$(PY) tests/kfp/kfp_snapshots.py

# tests/kfp/test_kube_apiserver.py creates the stages' Pods on the real control plane of tests/deploy (mk/kube.mk).
TEST_DEPS += kube-control-plane
