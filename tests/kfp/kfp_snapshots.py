"""The compiled pipelines checked in under ``components/snapshots/``, so that a change to the pipeline or to a
cluster profile shows in review as a diff of the YAML KFP receives.

    make kfp-snapshots          # = python tests/kfp/kfp_snapshots.py: rewrite them after an intended change

``test_compile.py::test_snapshot`` compiles each afresh and compares.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT_DIR = ROOT / "components" / "snapshots"

# name -> the overrides of `parathink kfp compile`
SNAPSHOTS = {
    "tiny": ["experiment=tiny"],  # the local profile: CPU pods, no node pool
    "parallel_r1_seen": ["experiment=parallel_r1_seen"],  # the GPU profile
    # sft on two nodes: its task becomes the launcher of a Kubeflow Trainer TrainJob
    "parallel_r1_seen_sft_2_nodes": ["experiment=parallel_r1_seen", "+cluster.stage_overrides.sft.nodes=2"],
}


def compile_snapshot(name: str, output: Path) -> None:
    from parathink.kfp.pipeline import compile_to
    from parathink.kfp.plan import make_plan

    compile_to(make_plan(SNAPSHOTS[name]), output)


def main() -> int:
    for name in SNAPSHOTS:
        out = SNAPSHOT_DIR / f"{name}.yaml"
        compile_snapshot(name, out)
        print(f"wrote {out.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
