"""The gate after ``filter`` (great-expectations, with data docs): the accepted-traces suite; plus the raw suite on
its input when ``filter.input`` names traces from outside the run, which no teacher gate has checked."""

from __future__ import annotations

import tempfile
from pathlib import Path

from parathink.quality.data_gates import data_docs_dir, raw_rows
from parathink.quality.expectations import Expectation
from parathink.quality.gate import GateInput, gate_section


def _filter_input(cfg, scratch: Path) -> Path:
    src = str(cfg.filter.input)
    if not src.startswith("s3://"):
        return Path(src)
    from parathink import storage

    local = scratch / "input.jsonl"
    local.write_bytes(storage.read_bytes(src))
    return local


def filter_gate(cfg, out: GateInput) -> list[Expectation]:
    from parathink.config.filter import FilterStageConfig
    from parathink.quality import data_suites
    from parathink.quality.traces import BadLine, judge, read_raw

    g = gate_section(cfg, "filter")
    filter_cfg = FilterStageConfig.of(cfg).bounds()
    # The accepted traces judged again, independently of the verdicts the filter wrote next to them.
    items = list(read_raw(out.folder / "accepted.jsonl"))
    accepted = [judge(item[1], filter_cfg) for item in items if not isinstance(item, BadLine)]
    unreadable = Expectation("accepted.unreadable_lines", len(items) - len(accepted), "==", 0,
                             len(items) == len(accepted))
    gx = data_suites.gx_module()
    suites = {"accepted_traces": (data_suites.accepted_frame(accepted),
                                  data_suites.accepted_checks(gx, g["min_accepted"], filter_cfg))}
    with tempfile.TemporaryDirectory() as scratch:
        if cfg.filter.input is not None:  # traces from outside the run: no teacher gate has seen them
            rows = raw_rows(_filter_input(cfg, Path(scratch)), filter_cfg.grammar)
            suites = {"raw_traces": (data_suites.raw_frame(rows), data_suites.raw_checks(gx, g["min_valid_rate"])),
                      **suites}
        checks, _ = data_suites.validate(suites, data_docs_dir(out, g))
    return [*checks, unreadable]
