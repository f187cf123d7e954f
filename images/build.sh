#!/usr/bin/env bash
# Builds the images with podman (make images calls it):  bash images/build.sh NAME...
# NAME is a folder of images/ (trainer-cpu, orchestrator, mlflow, trainer) or a stand-in of images/offline/
# (postgres, s3). Each image is tagged PREFIX/NAME:VERSION (the package's), :COMMIT (git) and :latest, and one line
# is printed for it: the reference, the image ID (the config's digest, what a pod's imageID shows), the manifest
# digest, the size and the build time.
# The Python base is the real one when it can be pulled; otherwise the offline stand-in (images/offline/base.sh),
# and the same for the official Airflow image under the orchestrator. pip in the RUN steps gets the host's pip
# configuration through volumes (images/offline/pip_build_conf.py), never through a layer.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${IMAGE_PREFIX:-localhost/parathink}
CACHE=${IMAGES_CACHE:-$HOME/.cache/parathink/images}
PYTHON_IMAGE=${PYTHON_IMAGE:-docker.io/library/python:3.11.14-slim-bookworm}
AIRFLOW_IMAGE=${AIRFLOW_IMAGE:-docker.io/apache/airflow:$(sed -n 's/^apache-airflow==//p' images/orchestrator/requirements.txt)-python3.11}
OFFLINE_BASE=localhost/parathink/python-offline:3.11-bookworm
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo nogit)
for name in "$@"; do  # every name checked before anything is pulled or built
  case $name in
    trainer-cpu|mlflow|orchestrator|postgres|s3|trainer) ;;
    *) echo "images: no image named $name (trainer-cpu, orchestrator, mlflow, postgres, s3, trainer)" >&2; exit 2 ;;
  esac
done

mkdir -p "$CACHE"

# An image that exists here or can be pulled: 0; otherwise 1 (a machine without registry access).
have() { podman image exists "$1" || timeout 120 podman pull -q "$1" >/dev/null 2>&1; }

if ! have "$PYTHON_IMAGE"; then
  echo "images: $PYTHON_IMAGE cannot be pulled here; the offline stand-in $OFFLINE_BASE is the base (Debian's Python 3.11.2)" >&2
  podman image exists "$OFFLINE_BASE" || bash images/offline/base.sh "$OFFLINE_BASE" "$CACHE" >/dev/null
  PYTHON_IMAGE=$OFFLINE_BASE
fi
PIP_VOLUMES=$(python3 images/offline/pip_build_conf.py "$CACHE/pip")
TORCH_INDEX=https://download.pytorch.org/whl/cpu
curl -sf --max-time 10 -o /dev/null "$TORCH_INDEX/torch/" || TORCH_INDEX=""  # then pip's own indexes hold it

# What an image is built from, as one digest: the Dockerfile's options, the IDs of the images it starts from and every
# file the Dockerfiles copy (.containerignore keeps the rest out of the context). podman's own layer cache gets the
# same answer, but only after hashing each COPY's source: for trainer-cpu's 2 GB dependency layer that takes 1-2
# minutes on every `make images`, even when nothing changed (and make test runs make images).
# The files' part is the same for every image: hashed once, here.
FILES_DIGEST=$(find pyproject.toml setup.py README.md src hydra_conf dags images -type f \
  ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-64)
inputs_key() {  # inputs_key DOCKERFILE [podman build options...]
  {
    printf '%s\n' "$@" "PYTHON_IMAGE=$PYTHON_IMAGE" "$FILES_DIGEST"
    for arg in "$@" "PYTHON_IMAGE=$PYTHON_IMAGE"; do
      case $arg in *_IMAGE=*) podman image inspect --format '{{.Id}}' "${arg#*=}" 2>/dev/null || echo "absent ${arg#*=}" ;; esac
    done
  } | sha256sum | cut -c1-64
}

build() {  # build NAME DOCKERFILE [podman build options...]
  local name=$1 file=$2; shift 2
  local ref="$PREFIX/$name:$VERSION" start=$SECONDS key note=""
  key=$(inputs_key "$file" "$@")
  # An image built from these very inputs is this build's result: tagged with this commit, not rebuilt.
  # IMAGES_REBUILD=1 builds anyway (podman's layer cache still applies).
  if [[ -z ${IMAGES_REBUILD:-} ]] &&
     [[ $(podman image inspect --format '{{index .Labels "io.parathink.inputs"}}' "$ref" 2>/dev/null) == "$key" ]]; then
    podman tag "$ref" "$PREFIX/$name:$COMMIT" "$PREFIX/$name:latest"
    note=" (inputs unchanged: not rebuilt)"
  else
    mkdir -p "$CACHE/logs"
    # shellcheck disable=SC2086  # PIP_VOLUMES is a list of options, quoted by pip_build_conf.py
    eval podman build --layers --file "$file" --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" --label "io.parathink.inputs=$key" \
      --build-arg "PARATHINK_BUILD_INPUTS=sha256:$key" \
      $PIP_VOLUMES '"$@"' --tag "$ref" --tag "$PREFIX/$name:$COMMIT" --tag "$PREFIX/$name:latest" . \
      > "$CACHE/logs/$name.log" 2>&1 || { tail -30 "$CACHE/logs/$name.log" >&2; echo "images: $name failed (log: $CACHE/logs/$name.log)" >&2; exit 1; }
  fi
  local id digest size
  id=$(podman image inspect --format '{{.Id}}' "$ref")
  digest=$(podman image inspect --format '{{.Digest}}' "$ref")
  size=$(podman image inspect --format '{{.Size}}' "$ref")
  printf '%s id=sha256:%s digest=%s size=%dMB built_in=%ds%s\n' "$ref" "$id" "$digest" $((size / 1000000)) \
    $((SECONDS - start)) "$note"
}

one() {  # one NAME: the image NAME (and what it needs first)
  case $1 in
    trainer-cpu) build trainer-cpu images/trainer-cpu/Dockerfile --build-arg "TORCH_INDEX=$TORCH_INDEX" ;;
    mlflow)      build mlflow images/mlflow/Dockerfile ;;
    orchestrator)
      if ! have "$AIRFLOW_IMAGE"; then
        echo "images: $AIRFLOW_IMAGE cannot be pulled here; images/offline/airflow is its stand-in" >&2
        build airflow-offline images/offline/airflow/Dockerfile >&2
        AIRFLOW_IMAGE=$PREFIX/airflow-offline:$VERSION
      fi
      build orchestrator images/orchestrator/Dockerfile --build-arg "AIRFLOW_IMAGE=$AIRFLOW_IMAGE" ;;
    postgres|s3) build "$1-offline" "images/offline/$1/Dockerfile" ;;
    trainer)     build trainer images/trainer/Dockerfile ;;  # CUDA: torch's PyPI wheel brings CUDA, ~10 GB
  esac
}

# The images share no layer but the base above, and a cold build mostly waits on downloads and unpacking: they are
# built side by side, IMAGES_PARALLEL at a time (podman's store takes concurrent builds). Each prints its line when
# done; the first failure's log tail is printed and the script fails once every build has ended.
PARALLEL=${IMAGES_PARALLEL:-3}
pids=() failed=0
for name in "$@"; do
  while (( $(jobs -rp | wc -l) >= PARALLEL )); do wait -n || failed=1; done
  one "$name" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
exit $failed
