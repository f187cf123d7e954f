"""Plug-in stages (``stage_modules``) around real checkpoints.

As a model stage: ``<section>.source`` copied to ``model/``, and ``<section>.value`` to ``value.txt``. As the eval
stand-in (``<section>.results``: the model stages to score): a results.json whose easy-set accuracy for each is its
value / 100, the score stored on its version. The stored score and the model are independent on purpose: a
promotion that re-samples both models must decide on the models, not on what was stored.
"""

import json
import shutil


def run(cfg, ctx):
    c = cfg[ctx.name]
    if c.get("results"):
        stages = {str(s): {"easy": {"accuracy": int((ctx.input(str(s)) / "value.txt").read_text()) / 100,
                                    "parallel_rate": 0.0, "n": 1600, "k": 8}} for s in c.results}
        (ctx.out_dir / "results.json").write_text(json.dumps({"stages": stages}))
        return {}
    shutil.copytree(str(c.source), ctx.out_dir / "model")
    (ctx.out_dir / "value.txt").write_text(str(int(c.value)))
    return {"value": float(c.value)}
