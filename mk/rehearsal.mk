# The CPU rehearsal of every GPU experiment (docs/gpu.md, "The CPU rehearsal"): each `parathink run experiment=E
# scale=cpu` under torchrun with 2 processes, one stage cache shared (about 6 minutes on 2 quiet cores). `make test`
# runs the same tests (marked slow); here each experiment's times and memory ledger also go to
# bench-results/rehearsal.jsonl.
.PHONY: rehearsal

rehearsal: $(STAMP)
	mkdir -p bench-results
	rm -f bench-results/rehearsal.jsonl
	PARATHINK_REHEARSAL_RECORD=$(CURDIR)/bench-results/rehearsal.jsonl $(PY) -m pytest -q -s --durations=10 \
		tests/rehearsal $(PYTEST_ARGS)
