#!/usr/bin/env bash
# The CUDA trainer image's check, inside the image, on a machine without a GPU (make image-trainer-cuda runs it after
# the build): torch's CUDA and NCCL versions, DeepSpeed imports, vLLM imports in its own venv, `parathink plan
# experiment=parallel_r1_seen` validates, the user is uid 1000, PARATHINK_BUILD_INPUTS is the build's inputs key;
# its size and digest. One JSON line to OUT.
#   bash images/trainer/check.sh IMAGE [OUT]        (OUT: bench-results/trainer_cuda_image.json)
set -euo pipefail
IMAGE=${1:?usage: check.sh IMAGE [OUT]}
OUT=${2:-bench-results/trainer_cuda_image.json}
run() { podman run --rm --network none "$@"; }
torch=$(run --entrypoint /opt/parathink/bin/python "$IMAGE" -c '
import json, torch
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda,
                  "nccl": ".".join(map(str, torch.cuda.nccl.version())), "cudnn": torch.backends.cudnn.version()}))')
deepspeed=$(run -e DS_ACCELERATOR=cpu --entrypoint /opt/parathink/bin/python "$IMAGE" -c \
  'import deepspeed, transformers, datasets; print(deepspeed.__version__)' 2>/dev/null | tail -1)
vllm=$(run --entrypoint /opt/vllm/bin/python "$IMAGE" -c 'import vllm, torch; print(vllm.__version__, torch.__version__)' \
  2>/dev/null | tail -1)
plan=$(run "$IMAGE" plan experiment=parallel_r1_seen | /usr/bin/python3 -c \
  'import json, sys; d = json.load(sys.stdin); print(len(d["stages"]), d["placement"]["rl_easy"]["gpus_per_node"])')
uid=$(run --entrypoint id "$IMAGE" -u)
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
id=$(podman image inspect --format '{{.Id}}' "$IMAGE")
digest=$(podman image inspect --format '{{.Digest}}' "$IMAGE")
[[ $uid == 1000 ]] || { echo "check: the image runs as uid $uid, not 1000" >&2; exit 1; }
inputs=$(podman image inspect --format '{{index .Labels "io.parathink.inputs"}}' "$IMAGE")
baked=$(run --entrypoint /bin/sh "$IMAGE" -c 'echo "$PARATHINK_BUILD_INPUTS"')
[[ $baked == "sha256:$inputs" ]] || { echo "check: PARATHINK_BUILD_INPUTS is '$baked', the build's inputs sha256:$inputs" >&2; exit 1; }
mkdir -p "$(dirname "$OUT")"
/usr/bin/python3 - "$OUT" <<PY
import json, sys
record = {"image": "$IMAGE", "id": "sha256:$id", "digest": "$digest", "size_bytes": $size,
          "torch": $torch, "deepspeed": "$deepspeed", "vllm_and_its_torch": "$vllm",
          "plan_stages_and_rl_gpus": "$plan", "uid": $uid, "build_inputs": "$baked"}
open(sys.argv[1], "w").write(json.dumps(record, indent=2) + "\n")
print(json.dumps(record))
PY
