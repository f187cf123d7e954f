"""One process per GPU: ``parathink stage`` and ``parathink run`` start the ranks their placement asks for.

The plan carries each stage's launch (``placement.<stage>.launch``, :attr:`placement.cluster.Placement.launch`):
``torchrun --nproc_per_node N -m parathink.cli stage NAME`` for a single-node stage of N > 1 GPUs, one process
otherwise. Every launcher (Airflow's pods, KFP's components, a shell) calls ``parathink stage NAME [overrides]``,
and that process runs the launch: when its placement asks for more than one rank and it is not itself a rank of a
launch (no ``WORLD_SIZE`` in its environment), it becomes torchrun's agent, in this process, and the ranks run the
stage. Why here and not a ``torchrun`` in each launcher's command:

- exit codes: torchrun ends with 1 whatever its ranks ended with, and the launchers retry exit 1 alone (2, bad
  input, and 3, a gate failed, are final: docs/orchestration.md). The agent here reads the ranks' own codes and
  exits with rank 0's (or the first failed rank's), so a gate that fails under eight ranks is still a 3;
- one source: the pod's command stays ``parathink stage NAME``, the launch comes from the same config the plan
  printed, so no launcher can run a stage with other ranks than its placement (and its GPU request) says;
- the TrainJob of a multi-node stage already runs ``torchrun -m parathink.cli stage NAME`` (its ``launch``): its
  ranks have ``WORLD_SIZE`` set and run the stage at once.

``parathink run`` (the curriculum in one process tree, e.g. on a GPU node without an orchestrator) is started the
same way, once: under the largest launch of its single-node stages (8 ranks for parallel_r1_seen). Its stages then
run in those ranks, as ``torchrun --nproc_per_node 8 -m parathink.cli run`` runs them: a data-parallel stage (sft,
RL, eval) on every rank, the others on rank 0 while the rest wait (parathink.pipeline.runner); the vLLM teacher, one
process, starts its engines over every GPU of the node from rank 0 (placement.teacher.engines).

The agent process never touches CUDA: the ranks own the GPUs. On a machine without GPUs (the test cluster's fake
ones) the ranks run on the CPU, at most one per usable CPU (:func:`fit`); each rank gets its share of the CPUs'
threads (:func:`share_threads`).
"""

from __future__ import annotations

import os
import sys

from parathink import exits
from parathink.errors import ConfigError

TORCHRUN = "torchrun"


def launched() -> bool:
    """This process is a rank of a launch (torchrun, accelerate, a TrainJob): it runs its stage itself."""
    return "WORLD_SIZE" in os.environ or "LOCAL_RANK" in os.environ


def ranks(argv: list[str]) -> int:
    """Processes per node a launch argv starts (``--nproc_per_node``; 1 for one without torchrun)."""
    if argv[:1] != [TORCHRUN]:
        return 1
    for flag in ("--nproc_per_node", "--nproc-per-node"):
        if flag in argv:
            return int(argv[argv.index(flag) + 1])
    return 1


def run_launch(argv: list[str], overrides: list[str]) -> int:
    """Run ``argv + overrides`` (a torchrun launch) as torchrun would, in this process; the ranks' exit code."""
    if argv[:1] != [TORCHRUN]:
        raise ValueError(f"not a torchrun launch: {argv[:3]}")
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    args = get_args_parser().parse_args([*argv[1:], *overrides])
    try:
        run(args)
    except ChildFailedError as err:
        return rank_exit_code({rank: failure.exitcode for rank, failure in err.failures.items()})
    except SignalException as err:  # the agent stopped its ranks on SIGTERM / SIGINT (a pod deleted, Ctrl-C)
        return 128 + int(err.sigval)
    return exits.EXIT_OK


def rank_exit_code(codes: dict[int, int]) -> int:
    """The launch's exit code from its failed ranks' codes: rank 0's (it decides and publishes, so its code says
    what happened: 2 bad input, 3 a gate failed), else the lowest failed rank's; a rank ended by signal N as a
    shell reports it (128 + N).

    A rank that ended on SIGTERM (-15, or 143 from parathink's own handler) is passed over while another rank
    failed otherwise: torchrun's agent stops the ranks still running with SIGTERM once one fails, so rank 0 may
    have been stopped before it could fail the same way (both refuse a bad config; CI saw rank 1's 2 reported as
    rank 0's 143, which the orchestrators would have retried)."""
    failed = {rank: code for rank, code in codes.items() if code not in (-15, 143)} or codes
    rank = 0 if 0 in failed else min(failed)
    code = failed[rank]
    return 128 - code if code < 0 else code or exits.EXIT_ERROR


def fit(launch: list[str], what: str, visible: int, cpus: int) -> list[str] | None:
    """``launch`` for this machine: refused (ConfigError) where CUDA sees some GPUs but fewer than its ranks. With
    none (a CPU machine: a test cluster's fake GPUs, a CPU container of the GPU profile) the ranks run on the CPU,
    at most one per CPU this process may use (``cpus``; more would only take turns), and None when that leaves one
    rank: the stage then runs in this process, as it would on one GPU."""
    n = ranks(launch)
    if 0 < visible < n:
        raise ConfigError(f"{what}: {n} ranks (cluster.gpus_per_node) on a machine with {visible} visible GPUs; "
                          f"set cluster.gpus_per_node={visible} or run on the placement's node")
    if visible or n <= cpus:
        return launch
    if cpus < 2:
        return None
    flag = launch.index("--nproc_per_node")
    print(f"[parathink] {what}: no visible GPU; {n} ranks capped at {cpus}, the CPUs this process may use",
          file=sys.stderr, flush=True)
    return [*launch[:flag + 1], str(cpus), *launch[flag + 2:]]


def _stage_launch(name: str, overrides: list[str]) -> list[str] | None:
    """The launch to run for ``parathink stage NAME overrides`` here, or None to run the stage in this process."""
    from parathink.pipeline.compose import compose
    from parathink.pipeline.runner import stage_aliases
    from parathink.placement import cluster

    cfg = compose(stage_aliases(name, overrides))
    p = cluster.placement(cfg, name)
    return p.launch if p.nodes == 1 and p.procs_per_node > 1 else None


def run_launch_of(cfg, names: list[str]) -> list[str] | None:
    """``parathink run``'s launch: torchrun with the most ranks any of its single-node stages asks for, or None."""
    from parathink.placement import cluster

    enabled = [n for n in names if n in cfg and cfg[n].get("enabled", True)]
    most = max((p.procs_per_node for n in enabled if (p := cluster.placement(cfg, n)).nodes == 1), default=1)
    if most < 2:
        return None
    return [TORCHRUN, "--nproc_per_node", str(most), "-m", "parathink.cli", "run"]


def _start(launch: list[str], overrides: list[str], what: str) -> int | None:
    """Run ``launch`` with ``overrides``: its ranks' exit code (2, one line, when this machine cannot hold them);
    None when this machine runs it as one process (:func:`fit`)."""
    def fitted():
        import torch

        from parathink import threads

        # device_count: NVML's count where it can, no CUDA context in this process (the ranks own the GPUs).
        found["launch"] = fit(launch, what, torch.cuda.device_count(), threads.usable_cpus())

    found: dict = {}
    code = exits.guarded(fitted)
    if code != exits.EXIT_OK:
        return code
    if found["launch"] is None:
        return None
    n = ranks(found["launch"])
    share_threads(n)
    print(f"[parathink] {what}: starting {n} ranks: {' '.join(found['launch'])} ...", file=sys.stderr, flush=True)
    return run_launch(found["launch"], overrides)


def share_threads(n: int) -> None:
    """Give each of ``n`` ranks its share of the pod's CPUs. parathink.threads put the whole count in the
    environment (cli.main), which every rank inherits: eight ranks of a 32-CPU pod would each start 32 threads.
    A count the user set (one other than threads' own) is kept."""
    from parathink import threads

    usable = threads.usable_cpus()
    share = str(max(1, usable // n))
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var) in (None, str(usable)):
            os.environ[var] = share


def _planned(find) -> list[str] | None:
    """``find()``'s launch; None when the config is bad: the command then runs in this process and reports it there,
    in one line, as it always has."""
    try:
        return find()
    except ConfigError:
        return None


def main_stage(name: str, overrides: list[str]) -> int:
    """``parathink stage NAME [overrides]``: the placement's ranks, or the stage in this process."""
    from parathink.pipeline import runner

    launch = None if launched() else _planned(lambda: _stage_launch(name, overrides))
    code = None if launch is None else _start(launch, overrides, f"stage {name}")
    return runner.main_stage(name, overrides) if code is None else code


def main_run(overrides: list[str]) -> int:
    """``parathink run [overrides]``: the curriculum under the ranks its GPU stages ask for, or in this process."""
    from parathink.pipeline import runner

    def find():
        from parathink.pipeline.compose import compose

        cfg = compose(overrides)
        return run_launch_of(cfg, [str(s) for s in cfg.stages])

    launch = None if launched() else _planned(find)
    code = None if launch is None else _start(launch, overrides, "run")
    return runner.main_run(overrides) if code is None else code
