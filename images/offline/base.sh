#!/usr/bin/env bash
# Builds the offline stand-in of the images' Python base (python:3.11.14-slim-bookworm) where no container registry
# can be reached: a minimal Debian bookworm (mmdebstrap --variant=minbase, from the Debian mirror apt already uses)
# with python3, venv and pip, imported into podman as IMAGE.
#   bash images/offline/base.sh IMAGE CACHE_DIR          (mk/images.mk calls it when the real base cannot be pulled)
# Differences from the real base, which matter where a test compares: Python is Debian's 3.11.2 (the real one pins
# 3.11.14) at /usr/bin/python3 (python-is-python3 gives `python`), and pip is Debian's, below the real image's.
set -euo pipefail
IMAGE=${1:?usage: base.sh IMAGE CACHE_DIR}
CACHE=${2:?usage: base.sh IMAGE CACHE_DIR}
mkdir -p "$CACHE"
TAR="$CACHE/bookworm-python-minbase.tar"
if [ ! -s "$TAR" ]; then
  mmdebstrap --quiet --variant=minbase --format=tar \
    --include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates,passwd \
    --aptopt='Acquire::Retries "3"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/usr/share/doc/* "$1"/usr/share/man/*' \
    bookworm "$TAR.part" "$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || echo http://deb.debian.org/debian)"
  mv "$TAR.part" "$TAR"
fi
# Debian's pip refuses to install outside a venv (PEP 668); the images install into venvs or, as the official
# image's users do, with pip into the system: the marker goes so that both work as with the real base.
podman import --quiet \
  --change 'CMD ["python3"]' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PIP_BREAK_SYSTEM_PACKAGES=1' \
  "$TAR" "$IMAGE" >/dev/null
podman image inspect --format '{{.Id}}' "$IMAGE"
