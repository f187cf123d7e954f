"""One process per GPU (parathink.launch): `parathink stage` and `parathink run` start the ranks their placement's
launch asks for, as torchrun's agent in their own process, and exit with the ranks' own code (torchrun's is 1
whatever failed). Real processes on the CPU: the GPU profile's placement with 2 GPUs per node, fake here as on the
test cluster's node (the ranks join over gloo)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from parathink import launch

STAGES = Path(__file__).parent / "stages"
TWO_GPUS = ["cluster.accelerator=cuda", "cluster.gpus_per_node=2", "tracking=none"]


def par_stage(tmp_path: Path, *extra: str) -> list[str]:
    """The data-parallel test stage (tests/stages/rank_stage_parallel.py): it sums 1 + rank over the launch's process
    group, so its value.txt says how many ranks joined (10 + 1 + 2 for two)."""
    return [f"run_dir={tmp_path / 'run'}", f"+stage_modules.par={STAGES / 'rank_stage_parallel.py'}",
            f"+par.calls={tmp_path / 'calls.jsonl'}", "+par.collective=true", "cluster.gpu_stages=[par]", *TWO_GPUS,
            *extra]


def parathink(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    env = {"OMP_NUM_THREADS": "1", "CI": "true", "PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "parathink.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.mark.slow
def test_a_stage_placed_on_two_gpus_runs_as_two_ranks_that_join(tmp_path):
    proc = parathink("stage", "par", *par_stage(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[parathink] stage par: starting 2 ranks: torchrun --nproc_per_node 2 -m parathink.cli stage par" \
        in proc.stderr
    assert "par: running on 2 processes" in proc.stderr
    ranks = sorted(json.loads(line)["rank"] for line in (tmp_path / "calls.jsonl").read_text().splitlines())
    assert ranks == [0, 1] and (tmp_path / "run" / "par" / "value.txt").read_text() == "13"


@pytest.mark.slow
def test_the_ranks_exit_code_is_the_launchs_not_torchruns_1(tmp_path):
    """A config the ranks refuse (an empty run_dir: checked by each rank, not by the launch) exits 2, not
    retried; torchrun itself would have said 1, which the orchestrators retry."""
    proc = parathink("stage", "par", *par_stage(tmp_path, "run_dir="))
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "starting 2 ranks" in proc.stderr and "run_dir: must be" in proc.stderr


@pytest.mark.parametrize("extra, expected", [
    (["cluster.gpus_per_node=1"], None), (["cluster.accelerator=cpu"], None), (["cluster.gpu_stages=[]"], None),
    ([], ["torchrun", "--nproc_per_node", "2", "-m", "parathink.cli", "stage", "par"]),
])
def test_one_gpu_or_a_cpu_placement_runs_the_stage_in_this_process(tmp_path, extra, expected):
    assert launch._stage_launch("par", par_stage(tmp_path, *extra)) == expected


@pytest.mark.parametrize("codes, code", [
    ({0: 3, 1: 1}, 3), ({1: 2}, 2), ({2: 0, 3: 1}, 1), ({0: -9, 1: 1}, 137),
    # a rank the agent stopped (SIGTERM) after another failed is not the cause; alone, it is the code
    ({1: 1, 0: -15}, 1), ({0: 143, 1: 2}, 2), ({0: 143, 1: -15}, 143), ({1: -15}, 143),
])
def test_rank_0s_code_wins_then_the_lowest_failed_rank(codes, code):
    assert launch.rank_exit_code(codes) == code


def test_run_starts_under_the_largest_launch_of_its_single_node_stages():
    from parathink.pipeline.compose import compose

    cfg = compose(["experiment=parallel_r1_seen"])
    assert launch.run_launch_of(cfg, [str(s) for s in cfg.stages]) == [
        "torchrun", "--nproc_per_node", "8", "-m", "parathink.cli", "run"]
    assert launch.run_launch_of(compose([]), ["base", "teacher", "filter"]) is None  # the local profile: CPU
    assert launch.ranks(["torchrun", "--nproc_per_node", "8", "-m", "x"]) == 8
    assert launch.ranks(["parathink", "stage", "x"]) == 1


def test_a_rank_never_starts_ranks_of_its_own(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert launch.launched()
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert not launch.launched()


def test_each_rank_gets_its_share_of_the_pods_cpus(monkeypatch):
    from parathink import threads

    monkeypatch.setattr(threads, "usable_cpus", lambda: 32)  # a 32-CPU pod's quota
    monkeypatch.setenv("OMP_NUM_THREADS", "32")  # what threads.configure put there
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    launch.share_threads(8)
    assert (launch.os.environ["OMP_NUM_THREADS"], launch.os.environ["MKL_NUM_THREADS"]) == ("4", "4")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's own count stays
    launch.share_threads(8)
    assert launch.os.environ["OMP_NUM_THREADS"] == "3"


EIGHT = ["torchrun", "--nproc_per_node", "8", "-m", "parathink.cli", "stage", "sft"]


def test_a_machine_with_too_few_gpus_is_refused_and_a_cpu_one_runs_as_many_ranks_as_it_has_cpus():
    assert launch.fit(EIGHT, "stage sft", visible=8, cpus=2) == EIGHT
    with pytest.raises(launch.ConfigError, match=r"stage sft: 8 ranks \(cluster.gpus_per_node\) on a machine with "
                                                 r"2 visible GPUs; set cluster.gpus_per_node=2"):
        launch.fit(EIGHT, "stage sft", visible=2, cpus=64)
    # No GPU (fake GPUs of a test cluster, a CPU container of the GPU profile): one rank per CPU at most.
    assert launch.fit(EIGHT, "stage sft", visible=0, cpus=64) == EIGHT
    assert launch.fit(EIGHT, "stage sft", visible=0, cpus=2) == [*EIGHT[:2], "2", *EIGHT[3:]]
    assert launch.fit(EIGHT, "stage sft", visible=0, cpus=1) is None  # one rank: the stage runs in this process
