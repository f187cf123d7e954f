"""A small stage module for the runner's tests (plugged in through the config's ``stage_modules``).

It behaves like a training stage: ``steps`` steps of ``sleep`` seconds, a checkpoint in ``ctx.work_dir``
after every step (so a killed attempt resumes), one tracker metric per step, and its outputs written only
at the end: ``value.txt`` (its input's value plus the sum of its steps), ``metrics.jsonl``, and with
``model: true`` a fake ``model/`` checkpoint folder. Every invocation appends a line to ``calls`` (a file
outside the run directory), which is how tests see whether the runner ran or skipped it.
"""

import json
import os
import time

from parathink.quality import GateFailed


def validate(cfg):
    from parathink.errors import ConfigError

    for name in cfg.stage_modules:
        if str(cfg.stage_modules[name]).endswith("resume_stage.py") and int(cfg[name].steps) < 1:
            raise ConfigError(f"{name}.steps: must be >= 1, got {cfg[name].steps}")


def _save(path, data):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def run(cfg, ctx):
    c = cfg[ctx.name]
    ckpt = ctx.work_dir / "ckpt.json"
    state = json.loads(ckpt.read_text()) if ckpt.exists() else {"step": 0, "total": 0}
    start = state["step"]
    if c.get("calls"):
        with open(c.calls, "a") as f:
            f.write(json.dumps({"stage": ctx.name, "start": start, "pid": os.getpid()}) + "\n")
    if c.get("wait_for"):  # hold the stage open until the test creates this file (a slow stage, deterministically)
        while not os.path.exists(c.wait_for):
            time.sleep(0.05)
    base = int((ctx.input(c.input) / "value.txt").read_text()) if c.get("input") else 0
    rows = []
    for step in range(start + 1, int(c.steps) + 1):
        time.sleep(float(c.get("sleep", 0)))
        if c.get("fail_at") and step == int(c.fail_at):
            raise RuntimeError(f"{ctx.name}: planned failure at step {step}")
        if c.get("gate_at") and step == int(c.gate_at):
            raise GateFailed(f"{ctx.name}: valid-format rate 0.10 < 0.50")
        state = {"step": step, "total": state["total"] + step}
        ctx.tracker.log_metrics({"loss": 1.0 / step, "accuracy": step / int(c.steps),
                                 "parallel_rate": 1 - step / (2 * int(c.steps)),
                                 "relative_position": 0.2 + 0.5 * step / int(c.steps)}, step=step)
        _save(ckpt, state)
    for step in range(1, int(c.steps) + 1):
        rows.append({"step": step, "accuracy": step / int(c.steps), "parallel_rate": 1 - step / (2 * int(c.steps)),
                     "relative_position": 0.2 + 0.5 * step / int(c.steps)})
    (ctx.out_dir / "value.txt").write_text(str(base + state["total"]))
    (ctx.out_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if c.get("model"):
        (ctx.out_dir / "model").mkdir()
        (ctx.out_dir / "model" / "config.json").write_text(json.dumps({"model_type": "fake", "seed": ctx.seed}))
        (ctx.out_dir / "model" / "weights.bin").write_bytes(os.urandom(2048))
    if c.get("results"):  # play the eval stage: a results.json over the named stages' values
        stages = {}
        for stage in c.results:
            value = int((ctx.input(stage) / "value.txt").read_text())
            stages[stage] = {"hard": {"accuracy": value / 100, "pass_at_k": min(1.0, value / 50),
                                      "parallel_rate": 0.5, "relative_position": 0.4, "n": 1600, "k": 8}}
        (ctx.out_dir / "results.json").write_text(json.dumps({"stages": stages}))
    return {"total": float(state["total"]), "resumed_from": float(start)}
