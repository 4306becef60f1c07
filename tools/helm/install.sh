#!/usr/bin/env bash
# Install a helm binary without Docker or a package manager, for tests/deploy/test_deploy.py and for users.
#
#   tools/helm/install.sh            build once via the Go module proxy, then reuse the cached binary (< 1 s)
#   tools/helm/install.sh --print    print the path of the cached helm binary, build nothing
#
# helm is a Go program published as the module helm.sh/helm/v3, so `go install helm.sh/helm/v3/cmd/helm@vX`
# builds it from source through the Go module proxy (the official tarball host, get.helm.sh, is not needed).
#
# Environment:
#   HOURGLASS_HELM_VERSION   helm release (default v3.19.5; any v3 tag works)
#   HOURGLASS_HELM_CACHE     cache root (default ~/.cache/hourglass/helm); the binary goes to <root>/<version>/helm
#
# The tests find the binary through `tools/helm/install.sh --print` (or HELM=/path/to/helm, or helm on PATH).
set -euo pipefail

HELM_VERSION="${HOURGLASS_HELM_VERSION:-v3.19.5}"
CACHE_ROOT="${HOURGLASS_HELM_CACHE:-$HOME/.cache/hourglass/helm}"
OUT="$CACHE_ROOT/$HELM_VERSION"

say() { echo "install.sh: $*" >&2; }

if [[ "${1:-}" == "--print" ]]; then
    echo "$OUT/helm"
    exit 0
fi

# Fast path: the binary is there and runs.
# .complete marks a binary this script finished (with the Kubernetes version stamp below).
if [[ -x "$OUT/helm" && -f "$OUT/.complete" ]] && "$OUT/helm" version --short >/dev/null 2>&1; then
    say "cached: $OUT/helm ($("$OUT/helm" version --short))"
    exit 0
fi

GO="$(command -v go || true)"
if [[ -z "$GO" && -x /usr/local/go/bin/go ]]; then
    GO=/usr/local/go/bin/go
fi
if [[ -z "$GO" ]]; then
    say "go not found (install Go, e.g. to /usr/local/go, or put a helm binary on PATH)"
    exit 2
fi

T0=$SECONDS
mkdir -p "$OUT"
# Build into a temp dir and move into place, so an interrupted build never leaves a half-written binary
# behind that the fast path would accept.
TMP="$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
say "building helm $HELM_VERSION with $("$GO" version) (first time only, a few minutes on 2 cores)"
# helm's Makefile stamps the Kubernetes version it was built against (from its k8s.io/client-go
# dependency) into the binary; without it `helm template` assumes Kubernetes v1.20 and refuses charts
# that need newer. Read that version from helm's go.mod, as the Makefile does.
GOMOD="$("$GO" mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
CLIENT_GO="$(awk '$1 == "k8s.io/client-go" {print $2; exit}' "$GOMOD")"   # e.g. v0.34.2
K8S_MINOR="$(echo "$CLIENT_GO" | cut -d. -f2)"
if [[ -z "$K8S_MINOR" ]]; then
    say "could not read the k8s.io/client-go version from $GOMOD"
    exit 1
fi
K8S_MAJOR=1
# CGO off: a static binary that needs no C toolchain; -trimpath/-s -w: smaller, reproducible binary.
LDFLAGS="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    LDFLAGS+=" -X $pkg.k8sVersionMajor=$K8S_MAJOR -X $pkg.k8sVersionMinor=$K8S_MINOR"
done
CGO_ENABLED=0 GOBIN="$TMP" GOFLAGS=-mod=mod "$GO" install -trimpath -ldflags "$LDFLAGS" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
rm -f "$OUT/.complete"
mv -f "$TMP/helm" "$OUT/helm"
"$OUT/helm" version --short >/dev/null
echo "$HELM_VERSION kubernetes $K8S_MAJOR.$K8S_MINOR" > "$OUT/.complete"
say "built $OUT/helm ($("$OUT/helm" version --short)) in $((SECONDS - T0)) s"
