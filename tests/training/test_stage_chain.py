"""Training stages that follow each other in one process set (issue 47 item 4): two DeepSpeed ZeRO-2 stages chained
under torchrun on two CPU ranks, as ``parathink run`` chains rl_easy -> rl_hard (and sft -> rl_easy) on a GPU node.
accelerate's process-wide state would refuse the second stage's DeepSpeed plugin; ``stage_state`` resets it around
each stage's run and frees what the stage held."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rl_helpers import TORCHRUN_PREAMBLE

HELPERS = str(Path(__file__).with_name("rl_helpers.py"))
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("rl_test_setup")

CHAIN_SCRIPT = TORCHRUN_PREAMBLE + """
import gc, json, os
from pathlib import Path
from accelerate import Accelerator
from parathink.training.rl_parallel import deepspeed_plugin
from parathink.training.stage_state import own_training_state, reset_training_state

init, root, ds = Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
cfg = helpers.rl_cfg(steps=1, prompts_per_step=2, group_size=2, token_budget=60, deepspeed=ds,
                     problems={"source": "synthetic", "level": "easy", "split": "train", "n": 8})

# The failure the reset removes: a second Accelerator with a DeepSpeed plugin in one process.
first = Accelerator(deepspeed_plugin=deepspeed_plugin(cfg))
try:
    Accelerator(deepspeed_plugin=deepspeed_plugin(cfg))
    refused = False
except NotImplementedError:
    refused = True
del first
reset_training_state()
os.environ.pop("ACCELERATE_USE_DEEPSPEED", None)  # what accelerate set there (the stages' wrapper restores it so)

def engines():
    from deepspeed.runtime.engine import DeepSpeedEngine
    gc.collect()
    return sum(isinstance(o, DeepSpeedEngine) for o in gc.get_objects())

stage = own_training_state(helpers.train_standalone)
ctx_a, summary_a = stage(cfg, root / "a", init)          # e.g. rl_easy
after_a = engines()
distributed.group().barrier()  # rank 0 publishes after the others have returned (the runner waits the same way)
start_b = ctx_a.out_dir / "model"
ctx_b, summary_b = stage(cfg, root / "b", start_b)       # e.g. rl_hard, from what the first stage published
out = {"refused": refused, "engines_after": [after_a, engines()], "steps": [summary_a.get("steps"), summary_b.get("steps")],
       "env": os.environ.get("ACCELERATE_USE_DEEPSPEED"), "published": [str(ctx_a.out_dir), str(ctx_b.out_dir)]}
Path(root, f"rank{distributed.group().rank}.json").write_text(json.dumps(out))
"""


@pytest.mark.slow  # launches two torchrun processes; two ZeRO-2 stages of one step each
def test_two_deepspeed_stages_chain_in_one_process_set(tiny_checkpoint, tmp_path, torchrun):
    from safetensors.torch import load_file

    script = tmp_path / "chain.py"
    script.write_text(CHAIN_SCRIPT)
    ds = str(ROOT / "hydra_conf" / "deepspeed" / "zero2.json")
    proc = torchrun(str(script), HELPERS, str(tiny_checkpoint), str(tmp_path), ds)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in ranks:
        assert r["refused"]  # without the reset the second stage could not start
        assert r["engines_after"] == [0, 0]  # each stage's DeepSpeed engine is freed when it returns
        assert r["env"] is None  # and ACCELERATE_USE_DEEPSPEED does not outlive it
    assert ranks[0]["steps"] == [1.0, 1.0]  # rank 0 publishes; both stages trained their step
    a, b = (load_file(str(Path(p) / "model" / "model.safetensors")) for p in ranks[0]["published"])
    start = load_file(str(tiny_checkpoint / "model.safetensors"))
    assert max(float((a[k] - start[k]).abs().max()) for k in start) > 0  # the first stage trained
    assert max(float((b[k] - a[k]).abs().max()) for k in a) > 0  # the second trained on from the first's output


def test_training_stages_reset_the_process_state_around_their_run():
    """The sft and RL stages the runner calls are the wrapped ones."""
    from parathink.stages import rl, sft
    from parathink.training.stage_state import own_training_state

    wrapped = own_training_state(lambda: None).__code__
    for spec in (sft.STAGE, rl.rl_easy, rl.rl_hard, rl.rl_scaffold, rl.grpo_baseline):
        assert spec.run.__code__ is wrapped and hasattr(spec.run, "__wrapped__")
