# Process helpers shared by the scripts that start test servers (tools/kube/apiserver.sh,
# tools/kwok/cluster.sh, tools/kafka/kafka.sh). Sourced, not run. The caller defines `say` (its own
# message prefix) and, for read_pid, DIR (the run directory holding NAME.pid files); PYTHON may name the
# interpreter free_port uses (default python3).

# pid_alive PID: the process exists (an empty PID is not alive).
pid_alive() { [[ -n "${1:-}" ]] && kill -0 "$1" 2>/dev/null; }

# read_pid NAME: the pid recorded in DIR/NAME.pid; fails if there is none.
read_pid() {
    local f="$DIR/$1.pid"
    [[ -f "$f" ]] && cat "$f"
}

# stop_pid PID WHAT [SECONDS]: TERM, wait up to SECONDS (default 20) for the process to go, then KILL.
stop_pid() {
    local pid="$1" what="$2" grace="${3:-20}" i
    pid_alive "$pid" || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < grace * 5; i++)); do
        pid_alive "$pid" || return 0
        sleep 0.2
    done
    say "$what (pid $pid) did not stop within $grace s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
}

# free_port: a TCP port on 127.0.0.1 nothing listens on right now.
free_port() {
    "${PYTHON:-python3}" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}
