#!/usr/bin/env bash
# A KWOK cluster for the end-to-end tests: a real control plane (etcd + kube-apiserver from
# tools/kube/apiserver.sh, kube-controller-manager, kube-scheduler for default-scheduler pods) and KWOK
# playing the kubelet of N fake 8-GPU nodes: they turn Ready, pods bound to them turn Running, deleted
# pods disappear. Nothing runs in a container; every binary is built from the Go module proxy.
#
#   tools/kwok/cluster.sh start DIR [N]   start everything in DIR (as apiserver.sh does), create fake nodes
#                                         kwok-node-0 .. kwok-node-<N-1> (default 4), wait until all are Ready
#   tools/kwok/cluster.sh nodes DIR N     create fake nodes up to kwok-node-<N-1> (existing ones kept), wait
#   tools/kwok/cluster.sh stop DIR        stop KWOK, the scheduler, the controller-manager, then the API server
#   tools/kwok/cluster.sh status DIR      exit 0 and print pids if everything runs, 3 otherwise
#
# DIR/kubeconfig and DIR/env are apiserver.sh's (admin token, CA); DIR/env gains the extra pids.
# Fake nodes carry the annotation kwok.x-k8s.io/node=fake (KWOK manages only those, so nodes created by
# other means are left alone), the label type=kwok, KAI's GPU labels (nvidia.com/gpu.product,
# nvidia.com/gpu.memory) and no taint, so KAI's example pods land on them unchanged.
#
# Environment:
#   HOURGLASS_KWOK_BIN_DIR     dir with kwok (default: tools/kwok/build.sh --print)
#   HOURGLASS_KUBE_BIN_DIR     dir with the Kubernetes binaries (default: tools/kube/build.sh --print)
#   HOURGLASS_KWOK_GPUS        GPUs per fake node (default 8)
#   HOURGLASS_KWOK_GPU_MEMORY  nvidia.com/gpu.memory label, MiB (default 81920, an A100 80GB)
#   HOURGLASS_KWOK_START_TIMEOUT  seconds to wait for each component / the nodes (default 120)
#
# Exit codes: 0 ok, 1 failure, 2 missing prerequisite (binaries not built), 3 not running.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
APISERVER_SH="$HERE/../kube/apiserver.sh"
PYTHON="${PYTHON:-python3}"
TIMEOUT="${HOURGLASS_KWOK_START_TIMEOUT:-120}"
COMPONENTS=(kwok kube-scheduler kube-controller-manager)  # stop order: the node agent first

say() { echo "kwok/cluster.sh: $*" >&2; }

usage() {
    echo "usage: $0 {start DIR [N]|nodes DIR N|stop DIR|status DIR}" >&2
    exit 1
}

[[ $# -ge 2 ]] || usage
CMD="$1"
mkdir -p "$2"
DIR="$(cd "$2" && pwd)"
NODES="${3:-4}"

# pid_alive, read_pid, stop_pid (given 10 s here), free_port
source "$HERE/../lib/process.sh"

# wait_healthz URL PID WHAT: the component's own /healthz (self-signed serving cert, anonymous access).
wait_healthz() {
    "$PYTHON" - "$1" "$2" "$3" "$TIMEOUT" <<'EOF'
import os, ssl, sys, time, urllib.request
url, pid, what, timeout = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
ctx = ssl._create_unverified_context()  # the component's self-signed cert, on 127.0.0.1
deadline = time.monotonic() + timeout
last = "no answer"
while True:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit(f"{what} exited during startup ({last})")
    try:
        with urllib.request.urlopen(url, timeout=5, context=ctx) as r:
            if r.status == 200:
                sys.exit(0)
    except Exception as exc:
        last = str(exc)
    if time.monotonic() > deadline:
        sys.exit(f"{what} not healthy after {timeout:.0f} s ({last})")
    time.sleep(0.2)
EOF
}

# make_nodes N: create the missing fake nodes, then wait until all N are Ready and untainted (the node
# lifecycle controller removes the not-ready taint the API server puts on new nodes once KWOK reports Ready).
make_nodes() {
    # shellcheck disable=SC1091
    source "$DIR/env"
    "$PYTHON" - "$KUBE_URL" "$ADMIN_TOKEN" "$DIR/pki/ca.crt" "$1" "${HOURGLASS_KWOK_GPUS:-8}" \
        "${HOURGLASS_KWOK_GPU_MEMORY:-81920}" "$TIMEOUT" <<'EOF'
import json, ssl, sys, time, urllib.error, urllib.request
url, token, ca, n, gpus, mem, timeout = sys.argv[1:]
n, timeout = int(n), float(timeout)
ctx = ssl.create_default_context(cafile=ca)
def call(method, path, body=None):
    req = urllib.request.Request(url + path, method=method, data=json.dumps(body).encode() if body else None,
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30, context=ctx) as r:
        return json.loads(r.read())
alloc = {"cpu": "128", "memory": "1Ti", "pods": "250", "nvidia.com/gpu": gpus, "ephemeral-storage": "1Ti"}
for i in range(n):
    name = f"kwok-node-{i}"
    node = {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "type": "kwok", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": mem,
                "nvidia.com/gpu.count": gpus,
            },
        },
        "status": {"allocatable": alloc, "capacity": alloc},
    }
    try:
        call("POST", "/api/v1/nodes", node)
    except urllib.error.HTTPError as e:
        if e.code != 409:
            sys.exit(f"creating node {name}: HTTP {e.code} {e.read()[:300]!r}")
deadline = time.monotonic() + timeout
while True:
    items = call("GET", "/api/v1/nodes?labelSelector=type%3Dkwok")["items"]
    ready = {
        x["metadata"]["name"] for x in items
        if not x["spec"].get("taints")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in x.get("status", {}).get("conditions", []))
    }
    missing = [f"kwok-node-{i}" for i in range(n) if f"kwok-node-{i}" not in ready]
    if not missing:
        break
    if time.monotonic() > deadline:
        sys.exit(f"{len(missing)} fake nodes not Ready and untainted after {timeout:.0f} s: {missing[:5]}")
    time.sleep(0.2)
EOF
}

start() {
    local kpid
    kpid="$(read_pid kwok || true)"
    if pid_alive "$kpid"; then
        say "already running (kwok pid $kpid), kubeconfig $DIR/kubeconfig"
        make_nodes "$NODES"
        return 0
    fi
    local kube_bin="${HOURGLASS_KUBE_BIN_DIR:-$("$HERE/../kube/build.sh" --print)}"
    local kwok_bin="${HOURGLASS_KWOK_BIN_DIR:-$("$HERE/build.sh" --print)}"
    local c
    for c in "$kube_bin/kube-controller-manager" "$kube_bin/kube-scheduler" "$kwok_bin/kwok"; do
        if [[ ! -x "$c" ]]; then
            say "$c not found: run tools/kube/build.sh and tools/kwok/build.sh first"
            exit 2
        fi
    done
    local t0
    t0="$(date +%s%N)"
    "$APISERVER_SH" start "$DIR"
    local kc="$DIR/kubeconfig"

    # kube-controller-manager: Jobs, ReplicaSets, garbage collection, namespaces, node lifecycle. No
    # serving port; no QPS limit (as kwokctl runs it), so a benchmark measures Hourglass, not client throttling.
    setsid "$kube_bin/kube-controller-manager" --kubeconfig "$kc" --leader-elect=false --secure-port=0 \
        --use-service-account-credentials=false --root-ca-file "$DIR/pki/ca.crt" \
        --service-account-private-key-file "$DIR/pki/sa.key" \
        --controllers='*,-nodeipam,-service-lb-controller,-persistentvolume-binder,-attachdetach' \
        --kube-api-qps=5000 --kube-api-burst=10000 --v=1 \
        >"$DIR/kube-controller-manager.log" 2>&1 </dev/null &
    echo $! >"$DIR/kube-controller-manager.pid"

    # kube-scheduler for pods that ask for the default scheduler (it ignores schedulerName: hourglass).
    local sport
    sport="$(free_port)"
    setsid "$kube_bin/kube-scheduler" --kubeconfig "$kc" --authentication-kubeconfig "$kc" \
        --authorization-kubeconfig "$kc" --leader-elect=false --bind-address 127.0.0.1 --secure-port "$sport" \
        --cert-dir "$DIR/kube-scheduler-certs" --kube-api-qps=5000 --kube-api-burst=10000 --v=1 \
        >"$DIR/kube-scheduler.log" 2>&1 </dev/null &
    echo $! >"$DIR/kube-scheduler.pid"

    # KWOK manages only the nodes annotated as fake ones.
    setsid "$kwok_bin/kwok" --kubeconfig "$kc" --config "$HERE/stages.yaml" \
        --manage-all-nodes=false --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
        --node-lease-duration-seconds=40 --cidr=10.128.0.0/12 --node-ip=10.127.0.1 \
        >"$DIR/kwok.log" 2>&1 </dev/null &
    echo $! >"$DIR/kwok.pid"
    cat >>"$DIR/env" <<EOF
KUBE_CONTROLLER_MANAGER_PID=$(cat "$DIR/kube-controller-manager.pid")
KUBE_SCHEDULER_PID=$(cat "$DIR/kube-scheduler.pid")
KWOK_PID=$(cat "$DIR/kwok.pid")
EOF
    if ! wait_healthz "https://127.0.0.1:$sport/healthz" "$(read_pid kube-scheduler)" kube-scheduler; then
        tail -n 20 "$DIR/kube-scheduler.log" >&2 || true
        stop
        exit 1
    fi
    if ! make_nodes "$NODES"; then
        for c in "${COMPONENTS[@]}"; do
            pid_alive "$(read_pid "$c")" || { say "$c exited:"; tail -n 20 "$DIR/$c.log" >&2 || true; }
        done
        stop
        exit 1
    fi
    local ms=$((($(date +%s%N) - t0) / 1000000))
    say "ready: $NODES fake nodes, kubeconfig $DIR/kubeconfig (started in $((ms / 1000)).$(printf %03d $((ms % 1000))) s)"
}

stop() {
    local c pid
    # TERM to all three at once (each takes ~2 s to shut down), then wait for each.
    for c in "${COMPONENTS[@]}"; do
        pid="$(read_pid "$c" || true)"
        pid_alive "$pid" && kill -TERM "$pid" 2>/dev/null || true
    done
    for c in "${COMPONENTS[@]}"; do
        stop_pid "$(read_pid "$c" || true)" "$c" 10
        rm -f "$DIR/$c.pid"
    done
    "$APISERVER_SH" stop "$DIR"
}

status() {
    local c pid bad=0
    for c in "${COMPONENTS[@]}"; do
        pid="$(read_pid "$c" || true)"
        if pid_alive "$pid"; then echo "$c pid=$pid"; else echo "$c not running"; bad=1; fi
    done
    "$APISERVER_SH" status "$DIR" || bad=1
    [[ $bad == 0 ]] || exit 3
}

case "$CMD" in
start) start ;;
nodes) make_nodes "$NODES" ;;
stop) stop ;;
status) status ;;
*) usage ;;
esac
