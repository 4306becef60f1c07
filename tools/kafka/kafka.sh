#!/usr/bin/env bash
# A single-node Apache Kafka broker (KRaft) on 127.0.0.1 from the official Maven Central jars.
#
#   tools/kafka/kafka.sh start     fetch jars (once, cached), format a fresh data dir, start, wait until ready
#   tools/kafka/kafka.sh stop      stop the broker started from the same run dir
#   tools/kafka/kafka.sh status    exit 0 and print the pid if running, exit 3 otherwise
#
# Environment:
#   HOURGLASS_KAFKA_PORT             client port (default 19092)
#   HOURGLASS_KAFKA_CONTROLLER_PORT  KRaft controller port (default client port + 1)
#   HOURGLASS_KAFKA_DIR              run dir: config, data/, kafka.pid, kafka.log
#                                    (default ${TMPDIR:-/tmp}/hourglass-kafka-$PORT)
#   HOURGLASS_CACHE                  jar cache root (default ~/.cache/hourglass); jars go to $HOURGLASS_CACHE/kafka/libs
#   HOURGLASS_KAFKA_START_TIMEOUT    seconds to wait for readiness (default 90)
#   HOURGLASS_KAFKA_HEAP             JVM heap (default 512m)
#
# Exit codes: 0 ok, 1 failure, 2 missing prerequisite (java, or mvn when the jars are not cached), 3 not running.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PORT="${HOURGLASS_KAFKA_PORT:-19092}"
CPORT="${HOURGLASS_KAFKA_CONTROLLER_PORT:-$((PORT + 1))}"
RUN_DIR="${HOURGLASS_KAFKA_DIR:-${TMPDIR:-/tmp}/hourglass-kafka-$PORT}"
CACHE="${HOURGLASS_CACHE:-$HOME/.cache/hourglass}"
LIBS="$CACHE/kafka/libs"
TIMEOUT="${HOURGLASS_KAFKA_START_TIMEOUT:-90}"
HEAP="${HOURGLASS_KAFKA_HEAP:-512m}"
PID_FILE="$RUN_DIR/kafka.pid"
PYTHON="${PYTHON:-python3}"

say() { echo "kafka.sh: $*" >&2; }
# pid_alive, read_pid, stop_pid, free_port
source "$HERE/../lib/process.sh"

running_pid() {
    [[ -f "$PID_FILE" ]] || return 1
    local pid
    pid="$(cat "$PID_FILE")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

fetch_jars() {
    if [[ -f "$LIBS/.complete" ]]; then
        return 0
    fi
    if ! command -v mvn >/dev/null; then
        say "mvn not found and no cached jars in $LIBS (install maven, e.g. apt-get install -y maven)"
        exit 2
    fi
    mkdir -p "$CACHE/kafka"
    local tmp="$LIBS.tmp.$$" t0=$SECONDS
    rm -rf "$tmp"
    say "fetching Kafka jars with Maven into $LIBS (first run only)"
    mvn -q -B -f "$HERE/pom.xml" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" >&2
    touch "$tmp/.complete"
    # Another process may have finished first: keep theirs.
    if ! mv -T "$tmp" "$LIBS" 2>/dev/null; then
        rm -rf "$tmp"
    fi
    say "jars fetched in $((SECONDS - t0)) s"
}

port_busy() {
    "$PYTHON" - "$1" <<'EOF'
import socket, sys
s = socket.socket()
s.settimeout(0.5)
sys.exit(0 if s.connect_ex(("127.0.0.1", int(sys.argv[1]))) == 0 else 1)
EOF
}

wait_ready() {
    local pid="$1"
    "$PYTHON" - "$PORT" "$TIMEOUT" "$pid" <<'EOF'
import os, socket, sys, time
port, timeout, pid = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
deadline = time.monotonic() + timeout
def alive():
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False
while True:
    if not alive():
        sys.exit("broker process exited during startup")
    if time.monotonic() > deadline:
        sys.exit(f"broker not ready after {timeout:.0f} s")
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        break
    except OSError:
        time.sleep(0.2)
import logging
logging.disable(logging.CRITICAL)
from kafka import KafkaAdminClient
while True:
    try:
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=5000)
        admin.list_topics()
        admin.close()
        break
    except Exception as exc:
        if not alive():
            sys.exit("broker process exited during startup")
        if time.monotonic() > deadline:
            sys.exit(f"broker not ready after {timeout:.0f} s: {exc}")
        time.sleep(0.3)
EOF
}

start() {
    if pid="$(running_pid)"; then
        say "already running (pid $pid) on 127.0.0.1:$PORT"
        return 0
    fi
    if ! command -v java >/dev/null; then
        say "java not found (install a JDK >= 17, e.g. apt-get install -y default-jdk-headless)"
        exit 2
    fi
    fetch_jars
    if port_busy "$PORT" || port_busy "$CPORT"; then
        say "port $PORT or $CPORT on 127.0.0.1 is already in use (set HOURGLASS_KAFKA_PORT)"
        exit 1
    fi
    local t0
    t0="$(date +%s%N)"
    mkdir -p "$RUN_DIR"
    rm -rf "$RUN_DIR/data"
    sed -e "s|@PORT@|$PORT|g" -e "s|@CONTROLLER_PORT@|$CPORT|g" -e "s|@DATA_DIR@|$RUN_DIR/data|g" \
        "$HERE/server.properties.template" >"$RUN_DIR/server.properties"
    local cp="$LIBS/*" log4j="-Dlog4j2.configurationFile=$HERE/log4j2.properties"
    local cluster_id
    cluster_id="$(java "$log4j" -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)"
    java "$log4j" -cp "$cp" kafka.tools.StorageTool format --standalone -t "$cluster_id" \
        -c "$RUN_DIR/server.properties" >"$RUN_DIR/format.log" 2>&1 || {
        say "storage format failed:"
        cat "$RUN_DIR/format.log" >&2
        exit 1
    }
    # setsid: the broker survives the caller's terminal and gets its own process group.
    setsid java -Xmx"$HEAP" -Xms"$HEAP" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 "$log4j" -cp "$cp" \
        kafka.Kafka "$RUN_DIR/server.properties" >"$RUN_DIR/kafka.log" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$PID_FILE"
    if ! wait_ready "$pid"; then
        say "broker failed to start; last log lines:"
        tail -n 30 "$RUN_DIR/kafka.log" >&2 || true
        stop_pid "$pid" broker
        rm -f "$PID_FILE"
        exit 1
    fi
    local ms=$((($(date +%s%N) - t0) / 1000000))
    say "ready on 127.0.0.1:$PORT (pid $pid, run dir $RUN_DIR, started in $((ms / 1000)).$(printf %03d $((ms % 1000))) s)"
}

stop() {
    if pid="$(running_pid)"; then
        stop_pid "$pid" broker
        say "stopped (pid $pid)"
    else
        say "not running"
    fi
    rm -f "$PID_FILE"
}

status() {
    if pid="$(running_pid)"; then
        echo "running pid=$pid port=$PORT dir=$RUN_DIR"
    else
        echo "not running (run dir $RUN_DIR)"
        exit 3
    fi
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
*)
    echo "usage: $0 {start|stop|status}" >&2
    exit 1
    ;;
esac
