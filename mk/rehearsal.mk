# The CPU rehearsal of every GPU experiment (docs/gpu.md, "The CPU rehearsal"): each `parathink run experiment=E
# scale=cpu` under torchrun with 2 processes, sharing one stage cache (about 8-10 minutes on 2 cores). The same
# tests run in `make test` (marked slow).
.PHONY: rehearsal

rehearsal: $(STAMP)
	$(PY) -m pytest -q -s --durations=10 tests/rehearsal $(PYTEST_ARGS)
