#!/usr/bin/env bash
# Prepare what a call on a lent GPU carries (README, "GPU checks"), so that the device time goes to the checks:
#   .whl/      wheels for Python 3.12 of what the GPU image lacks, at the versions this .venv is tested with
#              (DeepSpeed and antlr4 are built here from their sources, pure Python: DeepSpeed's ops JIT there);
#   .gpu/run/  a run directory holding base, teacher and filter, copied from a finished tiny run.
# Usage: benchmarks/gpu_prepare.sh [RUN_DIR]   (default runs/tiny; `make demo` makes it)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
RUN=${1:-runs/tiny}
for s in base teacher filter; do
  [ -f "$RUN/$s/_manifest.json" ] || { echo "gpu_prepare: $RUN/$s is not a finished stage (run make demo first)" >&2; exit 2; }
done
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
du -sh .whl .gpu
