"""A stage for the multi-process runner test: records which process ran it; with ``collective`` set it is
data-parallel and sums the processes' ranks through the launch's process group, as a training stage would; with
``fail_rank`` set that process raises before the collective, leaving the other inside it."""

import json
import os

import torch


def run(cfg, ctx):
    section = cfg[ctx.name]
    rank = int(os.environ.get("RANK", "0"))
    with open(section.calls, "a") as f:
        f.write(json.dumps({"stage": ctx.name, "rank": rank}) + "\n")
    value = int((ctx.input(section.input) / "value.txt").read_text()) if section.get("input") else 0
    if section.get("fail_rank") == rank:
        raise RuntimeError(f"rank {rank} fails on purpose")
    if section.get("collective"):
        import torch.distributed as dist

        ranks = torch.tensor([float(rank + 1)])
        dist.all_reduce(ranks)  # 1 + 2 on two processes
        value += int(ranks.item())
    if rank == 0:
        (ctx.out_dir / "value.txt").write_text(str(value + 10))
    return {"rank": float(rank)}
