#!/usr/bin/env bash
# A real single-node Kubernetes control plane for tests: etcd + kube-apiserver on 127.0.0.1, no
# controller-manager, no scheduler, no kubelet.
#
#   tools/kube/apiserver.sh start DIR    certs, tokens, etcd, kube-apiserver on free ports; wait for /readyz;
#                                        write DIR/kubeconfig (admin, token auth, CA data) and DIR/env
#   tools/kube/apiserver.sh stop DIR     stop both processes started from DIR (TERM, then KILL after 20 s)
#   tools/kube/apiserver.sh status DIR   exit 0 and print pids and URLs if running, exit 3 otherwise
#
# DIR/env (shell syntax) holds KUBE_URL, ETCD_URL, ADMIN_TOKEN, USER_TOKEN and the pids.
# Two static tokens exist: ADMIN_TOKEN (user hourglass-admin, group system:masters) and USER_TOKEN
# (user hourglass-tester, no groups: RBAC denies it everything until a (Cluster)RoleBinding grants it).
#
# What differs from a real cluster (nothing runs the controllers):
#   * namespaces other than default / kube-system / kube-public / kube-node-lease must be created by the
#     caller, and a deleted namespace stays Terminating forever; garbage collection never runs;
#   * the ServiceAccount admission plugin is disabled (no controller creates the "default" service
#     account, so pods would be rejected), so pods get no service account token volume;
#   * nodes are plain objects: status (allocatable, conditions) must be written through the status
#     subresource, and TaintNodesByCondition gives every new node the node.kubernetes.io/not-ready taint.
#
# Environment:
#   HOURGLASS_KUBE_BIN_DIR        dir with kube-apiserver and etcd (default: tools/kube/build.sh --print)
#   HOURGLASS_ETCD                etcd binary to use instead of the built one (e.g. /usr/bin/etcd)
#   HOURGLASS_KUBE_PORT           apiserver port (default: a free port)
#   HOURGLASS_KUBE_START_TIMEOUT  seconds to wait for /readyz (default 120)
#   HOURGLASS_KUBE_APISERVER_ARGS extra kube-apiserver flags, word-split (e.g. --watch-cache=false)
#
# Exit codes: 0 ok, 1 failure, 2 missing prerequisite (binaries not built, openssl missing), 3 not running.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python3}"
TIMEOUT="${HOURGLASS_KUBE_START_TIMEOUT:-120}"

say() { echo "apiserver.sh: $*" >&2; }

usage() {
    echo "usage: $0 {start|stop|status} DIR" >&2
    exit 1
}

[[ $# -eq 2 ]] || usage
CMD="$1"
mkdir -p "$2"
DIR="$(cd "$2" && pwd)"

# pid_alive, read_pid, stop_pid, free_port
source "$HERE/../lib/process.sh"

make_certs() {
    local pki="$DIR/pki"
    mkdir -p "$pki"
    (
        cd "$pki"
        # A CA, a serving cert for 127.0.0.1 signed by it (with SKI/AKI, which strict TLS clients such as
        # Python >= 3.13 require), and the service-account signing key pair.
        openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 -keyout ca.key -out ca.crt \
            -subj "/CN=hourglass-test-ca" \
            -addext "basicConstraints=critical,CA:TRUE" \
            -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
            -addext "subjectKeyIdentifier=hash" 2>/dev/null
        openssl req -newkey rsa:2048 -nodes -sha256 -keyout apiserver.key -out apiserver.csr \
            -subj "/CN=kube-apiserver" 2>/dev/null
        cat >apiserver.ext <<'EOF'
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid,issuer
EOF
        openssl x509 -req -sha256 -days 3650 -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
            -extfile apiserver.ext -out apiserver.crt 2>/dev/null
        openssl genrsa -out sa.key 2048 2>/dev/null
        openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
    )
}

# wait_http URL PID WHAT [CA TOKEN]: poll until URL answers 200 with body "ok", or PID dies, or timeout.
wait_http() {
    "$PYTHON" - "$@" "$TIMEOUT" <<'EOF'
import os, ssl, sys, time, urllib.request
args = sys.argv[1:]
url, pid, what = args[0], int(args[1]), args[2]
ca, token = (args[3], args[4]) if len(args) == 6 else (None, None)
timeout = float(args[-1])
ctx = ssl.create_default_context(cafile=ca) if ca else None
headers = {"Authorization": f"Bearer {token}"} if token else {}
deadline = time.monotonic() + timeout
last = "no answer"
while True:
    try:
        os.kill(pid, 0)
    except OSError:
        sys.exit(f"{what} exited during startup ({last})")
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5, context=ctx) as r:
            body = r.read().decode()
            if r.status == 200:
                sys.exit(0)
            last = f"HTTP {r.status}: {body[:200]}"
    except Exception as exc:  # not up yet: connection refused, 500 while post-start hooks run, ...
        last = str(exc)
    if time.monotonic() > deadline:
        sys.exit(f"{what} not ready after {timeout:.0f} s ({last})")
    time.sleep(0.25)
EOF
}

# pad_etcd_revision URL N: N puts of one key outside the apiserver's /registry prefix (gRPC gateway, JSON).
pad_etcd_revision() {
    "$PYTHON" - "$1" "$2" <<'EOF'
import base64, json, sys, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
key = base64.b64encode(b"/hourglass-test/revision-padding").decode()
for i in range(n):
    body = json.dumps({"key": key, "value": base64.b64encode(str(i).encode()).decode()}).encode()
    req = urllib.request.Request(f"{url}/v3/kv/put", data=body, headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()
EOF
}

start() {
    local apid epid
    apid="$(read_pid kube-apiserver || true)"
    if pid_alive "$apid"; then
        say "already running (pid $apid), kubeconfig $DIR/kubeconfig"
        return 0
    fi
    local bin="${HOURGLASS_KUBE_BIN_DIR:-$("$HERE/build.sh" --print)}"
    local apiserver="$bin/kube-apiserver" etcd="${HOURGLASS_ETCD:-$bin/etcd}"
    if [[ ! -x "$apiserver" || ! -x "$etcd" ]]; then
        say "kube-apiserver / etcd not found in $bin: run tools/kube/build.sh first"
        exit 2
    fi
    if ! command -v openssl >/dev/null; then
        say "openssl not found (apt-get install -y openssl)"
        exit 2
    fi
    local t0
    t0="$(date +%s%N)"
    rm -rf "$DIR/etcd-data" "$DIR/pki"
    make_certs

    local admin_token user_token
    admin_token="$(openssl rand -hex 24)"
    user_token="$(openssl rand -hex 24)"
    umask 077
    printf '%s,hourglass-admin,hourglass-admin,"system:masters"\n%s,hourglass-tester,hourglass-tester\n' \
        "$admin_token" "$user_token" >"$DIR/pki/tokens.csv"
    umask 022

    local etcd_port etcd_peer kube_port
    etcd_port="$(free_port)"
    etcd_peer="$(free_port)"
    kube_port="${HOURGLASS_KUBE_PORT:-$(free_port)}"

    # etcd: a throwaway single member; fsync off where supported (test data, faster on slow disks).
    local etcd_extra=()
    if "$etcd" --help 2>&1 | grep -q -- '--unsafe-no-fsync'; then
        etcd_extra+=(--unsafe-no-fsync)
    fi
    # setsid: the servers get their own process group and survive the caller's terminal.
    setsid "$etcd" --name hourglass --data-dir "$DIR/etcd-data" \
        --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
        --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
        --initial-cluster "hourglass=http://127.0.0.1:$etcd_peer" --log-level warn "${etcd_extra[@]}" \
        >"$DIR/etcd.log" 2>&1 </dev/null &
    epid=$!
    echo "$epid" >"$DIR/etcd.pid"
    if ! wait_http "http://127.0.0.1:$etcd_port/health" "$epid" etcd; then
        tail -n 20 "$DIR/etcd.log" >&2 || true
        stop_pid "$epid" etcd
        exit 1
    fi
    # A brand-new etcd is at revision 1, so the apiserver's watch caches would start at revision ~1 and
    # accept a watch from resourceVersion "1" (replaying history) instead of answering 410 Gone as any
    # cluster with a past does. A few writes outside /registry give etcd that past first.
    pad_etcd_revision "http://127.0.0.1:$etcd_port" 10

    setsid "$apiserver" \
        --etcd-servers "http://127.0.0.1:$etcd_port" \
        --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$kube_port" \
        --tls-cert-file "$DIR/pki/apiserver.crt" --tls-private-key-file "$DIR/pki/apiserver.key" \
        --client-ca-file "$DIR/pki/ca.crt" \
        --token-auth-file "$DIR/pki/tokens.csv" \
        --authorization-mode RBAC \
        --disable-admission-plugins ServiceAccount \
        --service-account-issuer https://kubernetes.default.svc \
        --service-account-key-file "$DIR/pki/sa.pub" \
        --service-account-signing-key-file "$DIR/pki/sa.key" \
        --service-cluster-ip-range 10.0.0.0/24 \
        --profiling=false \
        --v 1 ${HOURGLASS_KUBE_APISERVER_ARGS:-} \
        >"$DIR/kube-apiserver.log" 2>&1 </dev/null &
    apid=$!
    echo "$apid" >"$DIR/kube-apiserver.pid"
    local url="https://127.0.0.1:$kube_port"
    if ! wait_http "$url/readyz" "$apid" kube-apiserver "$DIR/pki/ca.crt" "$admin_token"; then
        say "kube-apiserver failed to start; last log lines:"
        tail -n 30 "$DIR/kube-apiserver.log" >&2 || true
        stop_pid "$apid" kube-apiserver
        stop_pid "$epid" etcd
        exit 1
    fi

    local ca_data
    ca_data="$(base64 -w0 <"$DIR/pki/ca.crt")"
    cat >"$DIR/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: hourglass-test
  cluster:
    server: $url
    certificate-authority-data: $ca_data
users:
- name: hourglass-admin
  user:
    token: $admin_token
contexts:
- name: hourglass-test
  context:
    cluster: hourglass-test
    user: hourglass-admin
current-context: hourglass-test
EOF
    chmod 600 "$DIR/kubeconfig"
    cat >"$DIR/env" <<EOF
KUBE_URL=$url
ETCD_URL=http://127.0.0.1:$etcd_port
ADMIN_TOKEN=$admin_token
USER_TOKEN=$user_token
KUBE_APISERVER_PID=$apid
ETCD_PID=$epid
EOF
    local ms=$((($(date +%s%N) - t0) / 1000000))
    say "ready at $url (kube-apiserver pid $apid, etcd pid $epid, kubeconfig $DIR/kubeconfig, started in $((ms / 1000)).$(printf %03d $((ms % 1000))) s)"
}

stop() {
    local apid epid
    apid="$(read_pid kube-apiserver || true)"
    epid="$(read_pid etcd || true)"
    if ! pid_alive "$apid" && ! pid_alive "$epid"; then
        say "not running"
    fi
    # The apiserver first, so it does not spend its shutdown retrying a vanished etcd.
    stop_pid "$apid" kube-apiserver
    stop_pid "$epid" etcd
    rm -f "$DIR/kube-apiserver.pid" "$DIR/etcd.pid"
}

status() {
    local apid epid
    apid="$(read_pid kube-apiserver || true)"
    epid="$(read_pid etcd || true)"
    if pid_alive "$apid" && pid_alive "$epid"; then
        grep -E '^(KUBE_URL|ETCD_URL)=' "$DIR/env" || true
        echo "kube-apiserver pid=$apid etcd pid=$epid kubeconfig=$DIR/kubeconfig"
    else
        echo "not running (dir $DIR)"
        exit 3
    fi
}

case "$CMD" in
start) start ;;
stop) stop ;;
status) status ;;
*) usage ;;
esac
