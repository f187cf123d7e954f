#!/usr/bin/env bash
# Prepare what a call on a lent GPU carries (docs/gpu.md), so that the device time goes to the checks:
#   .whl/      wheels for Python 3.12 of what the GPU image lacks, at the versions this .venv is tested with
#              (DeepSpeed and antlr4 are built here from their sources, pure Python: DeepSpeed's ops JIT there);
#   .gpu/run/  a run directory holding base, teacher and filter (the `stages` plan starts from it).
# Usage: benchmarks/gpu_prepare.sh [--wheels-only | RUN_DIR]
#   --wheels-only: .whl alone, what gpu_check's default plan needs (no run directory: seconds, not minutes).
#   RUN_DIR: a finished run holding base, teacher and filter. Default: runs/tiny when `make demo` made it, else
#   runs/gpu_prep, made here by `parathink run experiment=tiny stages=[base,teacher,filter]` (a few minutes).
# The call carries the working tree plus .whl and .gpu: 64 MiB in all, checked at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
LIMIT_MIB=64
finished() { for s in base teacher filter; do [ -f "$1/$s/_manifest.json" ] || return 1; done; }
RUN=
if [ "${1:-}" = --wheels-only ]; then
  :
elif [ $# -ge 1 ]; then
  RUN=$1
  finished "$RUN" || { echo "gpu_prepare: $RUN lacks a finished base, teacher or filter stage" >&2; exit 2; }
elif finished runs/tiny; then
  RUN=runs/tiny
else
  RUN=runs/gpu_prep
  finished "$RUN" || .venv/bin/parathink run experiment=tiny "stages=[base,teacher,filter]" run_dir="$RUN" tracking=none
fi
version() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
rm -rf .whl .gpu
mkdir -p .whl .gpu/run
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  "transformers==$(version transformers)" "hydra-core==$(version hydra-core)" "omegaconf==$(version omegaconf)" \
  "math-verify==$(version math-verify)" "latex2sympy2_extended==$(version latex2sympy2_extended)" \
  "hjson==$(version hjson)" "pydantic==$(version pydantic)" "pydantic_core==$(version pydantic_core)" \
  "annotated-types==$(version annotated-types)" "typing-inspection==$(version typing-inspection)"
DS_BUILD_OPS=0 "$PY" -m pip wheel -q --no-deps --no-build-isolation -w .whl \
  "antlr4-python3-runtime==$(version antlr4-python3-runtime)" "deepspeed==$(version deepspeed)"
if [ -z "$RUN" ]; then
  rmdir .gpu/run .gpu
else
cp -r "$RUN/base" "$RUN/teacher" "$RUN/filter" .gpu/run/
rm -rf .gpu/run/filter/data_docs
"$PY" - "$RUN/run.json" .gpu/run/run.json <<'PYEOF'
import json, sys
meta = json.load(open(sys.argv[1]))
meta.pop("mlflow", None)  # the GPU call tracks nothing (tracking=none)
meta["stages"] = {k: {f: v for f, v in rec.items() if f != "mlflow_run_id"}
                  for k, rec in meta.get("stages", {}).items() if k in ("base", "teacher", "filter")}
json.dump(meta, open(sys.argv[2], "w"), indent=1)
PYEOF
fi
du -sh .whl $( [ -d .gpu ] && echo .gpu )
# What travels: tracked files, untracked files git does not ignore, and the carried folders.
tree=$( { git ls-files -z; git ls-files -z -o --exclude-standard; } | xargs -0 du -cb 2>/dev/null | awk '/total$/ {s += $1} END {print s + 0}')
carried=$(du -sb .whl $( [ -d .gpu ] && echo .gpu ) | awk '{s += $1} END {print s}')
total_mib=$(( (tree + carried) / 1048576 ))
echo "gpu_prepare: the call carries ${total_mib} MiB of ${LIMIT_MIB} (working tree $((tree / 1048576)) MiB, .whl + .gpu $((carried / 1048576)) MiB)"
[ "$total_mib" -lt "$LIMIT_MIB" ] || { echo "gpu_prepare: over the ${LIMIT_MIB} MiB a call carries" >&2; exit 1; }
