#!/usr/bin/env bash
# Build KWOK (Kubernetes WithOut Kubelet, sigs.k8s.io/kwok) for the end-to-end tests, from the Go module
# proxy. KWOK plays the kubelet of fake nodes: it keeps the nodes it manages Ready and, through its stages,
# moves the pods bound to them to Running (and deletes them when they are deleted).
#
#   tools/kwok/build.sh            build once, then reuse the cached binary (< 1 s)
#   tools/kwok/build.sh --print    print the cache dir holding kwok, build nothing
#
# sigs.k8s.io/kwok has no replace directives in its go.mod, so `go build` of its cmd/kwok package from a
# wrapper module is enough (no staging-module pinning as tools/kube/build.sh needs).
#
# Environment:
#   HOURGLASS_KWOK_VERSION   KWOK release (default v0.8.0)
#   HOURGLASS_KWOK_CACHE     cache root (default ~/.cache/hourglass/kwok); the binary goes to <root>/<version>/
set -euo pipefail

VERSION="${HOURGLASS_KWOK_VERSION:-v0.8.0}"
CACHE_ROOT="${HOURGLASS_KWOK_CACHE:-$HOME/.cache/hourglass/kwok}"
OUT="$CACHE_ROOT/$VERSION"

say() { echo "kwok/build.sh: $*" >&2; }

if [[ "${1:-}" == "--print" ]]; then
    echo "$OUT"
    exit 0
fi

if [[ -x "$OUT/kwok" && -f "$OUT/.complete" ]]; then
    say "cached: $OUT (kwok $VERSION)"
    exit 0
fi

GO="$(command -v go || true)"
if [[ -z "$GO" && -x /usr/local/go/bin/go ]]; then
    GO=/usr/local/go/bin/go
fi
if [[ -z "$GO" ]]; then
    # tools/kube/build.sh fetches a Go toolchain from the module proxy when none is installed; reuse it.
    HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
    boot="${HOURGLASS_KUBE_CACHE:-$HOME/.cache/hourglass/kube}/go/${HOURGLASS_GO_BOOTSTRAP:-go1.26.8}/bin/go"
    [[ -x "$boot" ]] || "$HERE/../kube/build.sh" >/dev/null
    GO="$boot"
fi

T0=$SECONDS
mkdir -p "$OUT"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/hourglass-kwok-build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
export GOFLAGS="${GOFLAGS:--buildvcs=false} -trimpath"
export CGO_ENABLED=0

cd "$WORK"
"$GO" mod init hourglass.local/kwokbuild >/dev/null 2>&1
say "resolving kwok $VERSION dependencies"
"$GO" get "sigs.k8s.io/kwok/cmd/kwok@$VERSION" >&2
say "compiling kwok"
# The version stamp KWOK's own Makefile sets, so `kwok --version` reports the release.
"$GO" build -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${VERSION#v}" \
    -o "$OUT/kwok.tmp.$$" sigs.k8s.io/kwok/cmd/kwok
mv -f "$OUT/kwok.tmp.$$" "$OUT/kwok"
"$OUT/kwok" --version >&2 || true
touch "$OUT/.complete"
say "kwok built in $((SECONDS - T0)) s: $OUT"
