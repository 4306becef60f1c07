#!/usr/bin/env bash
# Build a real kube-apiserver (and etcd) for the integration tests, from the Go module proxy, and the
# kube-controller-manager and kube-scheduler the KWOK cluster of the end-to-end tests runs (tools/kwok/).
#
#   tools/kube/build.sh            build once, then reuse the cached binaries (< 1 s)
#   tools/kube/build.sh --print    print the cache dir holding the binaries, build nothing
#
# kube-apiserver comes from the k8s.io/kubernetes module. That module's go.mod replaces every k8s.io/*
# staging module with ./staging/src/..., which a dependent module cannot see, so we build from a tiny
# wrapper module whose own replace directives pin each staging module to the matching published v0.x tag
# (v1.36.3 -> v0.36.3). The list of staging modules is read from the kubernetes go.mod itself, so a version
# bump needs no edit here. etcd is built the same way from go.etcd.io/etcd (its go.mod also uses local
# replaces for api / client / pkg).
#
# Environment:
#   HOURGLASS_KUBE_VERSION   Kubernetes release (default v1.36.3)
#   HOURGLASS_ETCD_VERSION   etcd release (default v3.6.8, the etcd client version that Kubernetes release uses)
#   HOURGLASS_KUBE_CACHE     cache root (default ~/.cache/hourglass/kube); binaries go to <root>/<kube version>/
#   HOURGLASS_GO_BOOTSTRAP   Go release fetched from the module proxy when no `go` is installed (default go1.26.8)
#
# The Go build cache and module cache stay in Go's default locations (go env GOCACHE / GOMODCACHE), so a
# rebuild after the binaries were deleted is fast too.
set -euo pipefail

KUBE_VERSION="${HOURGLASS_KUBE_VERSION:-v1.36.3}"
ETCD_VERSION="${HOURGLASS_ETCD_VERSION:-v3.6.8}"
CACHE_ROOT="${HOURGLASS_KUBE_CACHE:-$HOME/.cache/hourglass/kube}"
OUT="$CACHE_ROOT/$KUBE_VERSION"

say() { echo "build.sh: $*" >&2; }

if [[ "${1:-}" == "--print" ]]; then
    echo "$OUT"
    exit 0
fi

# The Kubernetes commands built from the k8s.io/kubernetes module (one wrapper module, one dependency graph:
# the controller-manager and scheduler reuse most of the apiserver's compiled packages).
KUBE_CMDS=(kube-apiserver kube-controller-manager kube-scheduler)

all_built() {
    local c
    for c in "${KUBE_CMDS[@]}" etcd; do
        [[ -x "$OUT/$c" ]] || return 1
    done
}

# Fast path: every binary present and runnable.
if all_built && [[ -f "$OUT/.complete" ]]; then
    say "cached: $OUT (kube-apiserver $KUBE_VERSION, etcd $ETCD_VERSION)"
    exit 0
fi

# fetch_go: no Go installed. The Go toolchain is itself published on the module proxy
# (golang.org/toolchain, what GOTOOLCHAIN=auto downloads), so fetch it from there into the cache.
fetch_go() {
    local ver="$GO_BOOTSTRAP" root="${HOURGLASS_KUBE_CACHE:-$HOME/.cache/hourglass/kube}/go"
    local arch
    case "$(uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) say "no Go and no bootstrap for $(uname -m): install Go >= 1.26"; exit 2 ;;
    esac
    if [[ ! -x "$root/$ver/bin/go" ]]; then
        say "go not found: fetching $ver from the Go module proxy (golang.org/toolchain, ~70 MB)"
        mkdir -p "$root"
        "${PYTHON:-python3}" - "$ver" "$arch" "$root" <<'EOF'
import io, os, shutil, sys, urllib.request, zipfile
ver, arch, root = sys.argv[1:]
mod = f"v0.0.1-{ver}.linux-{arch}"
url = f"https://proxy.golang.org/golang.org/toolchain/@v/{mod}.zip"
data = urllib.request.urlopen(url, timeout=600).read()
prefix = f"golang.org/toolchain@{mod}/"
tmp = os.path.join(root, f".{ver}.tmp.{os.getpid()}")
with zipfile.ZipFile(io.BytesIO(data)) as z:
    for info in z.infolist():
        if not info.filename.startswith(prefix) or info.is_dir():
            continue
        dest = os.path.join(tmp, info.filename[len(prefix):])
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "wb") as f:
            f.write(z.read(info))
        # zipfile drops permissions: restore them from the Unix mode bits (bin/go must be executable).
        os.chmod(dest, (info.external_attr >> 16) & 0o777 or 0o644)
try:
    os.rename(tmp, os.path.join(root, ver))
except OSError:  # another build got there first
    shutil.rmtree(tmp)
EOF
    fi
    GO="$root/$ver/bin/go"
}

GO_BOOTSTRAP="${HOURGLASS_GO_BOOTSTRAP:-go1.26.8}"
GO="$(command -v go || true)"
if [[ -z "$GO" && -x /usr/local/go/bin/go ]]; then
    GO=/usr/local/go/bin/go
fi
if [[ -z "$GO" ]]; then
    fetch_go
fi

T0=$SECONDS
mkdir -p "$OUT"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/hourglass-kube-build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

# The Go toolchain the module asks for; GOTOOLCHAIN=auto (the default) would fetch it if ours is older.
export GOFLAGS="${GOFLAGS:--buildvcs=false} -trimpath"
export CGO_ENABLED=0

# kube-apiserver, kube-controller-manager, kube-scheduler --------------------------------------------------
build_kube() {
    local t0=$SECONDS dir="$WORK/kube" minor mod c
    minor="${KUBE_VERSION#v1.}"          # 36.3
    mkdir -p "$dir"
    cd "$dir"
    "$GO" mod init hourglass.local/kubebuild >/dev/null 2>&1
    mod="$("$GO" mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')"
    if [[ ! -f "$mod" ]]; then
        say "could not download k8s.io/kubernetes@$KUBE_VERSION through the module proxy"
        exit 1
    fi
    # Every "k8s.io/x => ./staging/src/k8s.io/x" becomes "k8s.io/x => k8s.io/x v0.<minor>".
    local staging
    staging="$(sed -n 's#^\s*\(k8s\.io/[a-z0-9-]*\) => \./staging/src/.*#\1#p' "$mod")"
    {
        echo "require k8s.io/kubernetes $KUBE_VERSION"
        echo "replace ("
        for m in $staging; do
            echo "    $m => $m v0.$minor"
        done
        echo ")"
    } >>go.mod
    say "resolving Kubernetes $KUBE_VERSION dependencies ($(wc -w <<<"$staging") staging modules pinned to v0.$minor)"
    for c in "${KUBE_CMDS[@]}"; do
        "$GO" get "k8s.io/kubernetes/cmd/$c@$KUBE_VERSION" >&2
    done
    # The same version stamps the Kubernetes build (hack/lib/version.sh) sets; without them the server
    # reports v0.0.0-master and clients' version checks get confused.
    local major="${KUBE_VERSION#v}"; major="${major%%.*}"
    local min="${minor%%.*}"
    local pkg=k8s.io/component-base/version
    local ld="-s -w -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$min"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    ld+=" -X ${pkg/component-base/client-go/pkg}.gitVersion=$KUBE_VERSION"
    for c in "${KUBE_CMDS[@]}"; do
        [[ -x "$OUT/$c" ]] && continue
        local tc=$SECONDS
        say "compiling $c (kube-apiserver cold: tens of minutes on 2 cores; the others reuse most of it)"
        "$GO" build -ldflags "$ld" -o "$OUT/$c.tmp.$$" "k8s.io/kubernetes/cmd/$c"
        mv -f "$OUT/$c.tmp.$$" "$OUT/$c"
        say "$c built in $((SECONDS - tc)) s"
    done
    say "Kubernetes commands built in $((SECONDS - t0)) s"
}

# etcd -------------------------------------------------------------------------------------------------
build_etcd() {
    local t0=$SECONDS dir="$WORK/etcd" mod ver="${ETCD_VERSION#v}"
    mkdir -p "$dir"
    cd "$dir"
    "$GO" mod init hourglass.local/etcdbuild >/dev/null 2>&1
    mod="$("$GO" mod download -json "go.etcd.io/etcd/server/v3@$ETCD_VERSION" | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')"
    if [[ ! -f "$mod" ]]; then
        say "could not download go.etcd.io/etcd/server/v3@$ETCD_VERSION through the module proxy"
        exit 1
    fi
    {
        echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
        echo "replace ("
        sed -n 's#^\s*\(go\.etcd\.io/etcd/[a-z0-9/-]*\) => \.\./.*#\1#p' "$mod" | while read -r m; do
            echo "    $m => $m $ETCD_VERSION"
        done
        echo ")"
    } >>go.mod
    say "resolving etcd $ETCD_VERSION dependencies"
    "$GO" get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
    say "compiling etcd"
    "$GO" build -ldflags "-s -w" -o "$OUT/etcd.tmp.$$" go.etcd.io/etcd/server/v3
    mv -f "$OUT/etcd.tmp.$$" "$OUT/etcd"
    say "etcd built in $((SECONDS - t0)) s ($ver)"
}

for c in "${KUBE_CMDS[@]}"; do
    if [[ ! -x "$OUT/$c" ]]; then
        build_kube
        break
    fi
done
[[ -x "$OUT/etcd" ]] || build_etcd

for c in "${KUBE_CMDS[@]}"; do
    "$OUT/$c" --version >&2
done
"$OUT/etcd" --version | head -1 >&2
touch "$OUT/.complete"
say "done in $((SECONDS - T0)) s: $OUT"
