"""The eval stage with a planted bug, for the eval gate's test: after the real evaluation, results.json loses every
model's ``hard`` set (as an eval that stopped half-way but still wrote its results would)."""

import dataclasses
import json

from parathink.stages.eval import STAGE as EVAL
from parathink.stages.eval import run as evaluate


def run(cfg, ctx):
    metrics = evaluate(cfg, ctx)
    path = ctx.out_dir / "results.json"
    results = json.loads(path.read_text())
    for sets in results["stages"].values():
        sets.pop("hard", None)
    path.write_text(json.dumps(results))
    return metrics


STAGE = dataclasses.replace(EVAL, run=run)  # eval's validation, gate and the rest as they are
