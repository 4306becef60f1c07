"""Standby and failover on the real kube-apiserver: two ``hourglass run --leader-elect`` and two
``hourglass bind --leader-elect`` processes (plus one ``hourglass ingest``) on one FileLog. The leaders are
SIGKILLed; the standbys take the Leases within a lease period and bind the pods submitted after the kill.
No pod is bound twice, no cycle is recorded twice, and a replay of the log verifies with 0 mismatches.
"""

from __future__ import annotations

import signal
import socket
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from analytics.rerun.replay import load_source, replay
from ingest.filelog import FileLog
from tests.support.cli_processes import CliProcess
from tests.support.kube_objects import apply_crds, make_node, make_pod, make_queue, pod_events, read_pod
from tests.support.kube_pipeline import decision_records

LEASE_S, RENEW_S, RETRY_S = 3.0, 2.0, 0.25


def _holder(api: Any, ns: str, name: str) -> str:
    from kubernetes import client

    try:
        lease = client.CoordinationV1Api(api).read_namespaced_lease(name, ns)
    except client.exceptions.ApiException:
        return ""
    return str(lease.spec.holder_identity or "") if lease.spec is not None else ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serves_metrics(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _scheduled(api: Any, ns: str, pod: str) -> bool:
    bound = "nodeName" in read_pod(api, ns, pod)["spec"]
    return bound and any(e["reason"] == "Scheduled" for e in pod_events(api, ns, pod))


def _wait(what: str, until: Any, timeout_s: float = 90.0) -> float:
    start = time.monotonic()
    while not until():
        assert time.monotonic() - start < timeout_s, f"timed out waiting for {what}"
        time.sleep(0.05)
    return time.monotonic() - start


def test_a_standby_takes_over_from_a_killed_leader_without_binding_twice(
    kube_api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    ns = kube_namespace
    sel = {"hourglass-e2e": ns}
    queue = f"{ns}-q"
    d = tmp_path / "log"
    kc = str(kube_api.kubeconfig)
    elect = [
        "--leader-elect",
        "--lease-namespace",
        ns,
        "--lease-duration",
        str(LEASE_S),
        "--lease-renew-deadline",
        str(RENEW_S),
        "--lease-retry-period",
        str(RETRY_S),
        "--kubeconfig",
        kc,
    ]
    procs: dict[str, CliProcess] = {}
    ports: dict[str, int] = {}

    def start(name: str, *args: str) -> None:
        procs[name] = CliProcess(name, list(args), tmp_path / "out")

    with kube_api.api_client() as api:
        apply_crds(api)
        for n in ("n1", "n2"):
            make_node(api, f"{ns}-{n}", gpus=4, labels=sel)
        make_queue(api, queue, 8)
        try:
            start("ingest", "ingest", "--log", str(d), "--kubeconfig", kc, "--namespace", ns)
            for i in (1, 2):
                for name in (f"run-{i}", f"bind-{i}"):
                    ports[name] = _free_port()
                run = ["run", "--log", str(d), "--poll-interval", "0.05", "--period", "0"]
                metrics = ["--metrics-port", str(ports[f"run-{i}"])]
                start(f"run-{i}", *run, *metrics, *elect, "--lease-identity", f"run-{i}")
                bind = ["bind", "--log", str(d), "--poll-interval", "0.05", "--workers", "2"]
                metrics = ["--metrics-port", str(ports[f"bind-{i}"])]
                start(f"bind-{i}", *bind, *metrics, *elect, "--lease-identity", f"bind-{i}")
            _wait(
                "both leases held",
                lambda: _holder(api, ns, "hourglass-scheduler") and _holder(api, ns, "hourglass-binder"),
            )
            # Standbys serve /metrics too (the chart's readiness probe), while not touching the log.
            _wait("every /metrics endpoint", lambda: all(_serves_metrics(port) for port in ports.values()))
            for i in range(4):
                make_pod(api, ns, f"p{i}", gpus=1, queue=queue, node_selector=sel)
            # Bound and announced: a leader killed between a bind and its Event leaves the Event unsent (the
            # successor finds the pod bound, counts it as already bound and sends nothing).
            _wait("the first pods bound", lambda: all(_scheduled(api, ns, f"p{i}") for i in range(4)))

            leaders = {
                lease: _holder(api, ns, lease) for lease in ("hourglass-scheduler", "hourglass-binder")
            }
            for who in leaders.values():
                procs[who].proc.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            for i in range(4, 8):
                make_pod(api, ns, f"p{i}", gpus=1, queue=queue, node_selector=sel)
            takeover: dict[str, float] = {}
            while len(takeover) < 2:
                for lease, who in leaders.items():
                    if lease not in takeover and _holder(api, ns, lease) not in ("", who):
                        takeover[lease] = time.monotonic() - killed
                assert time.monotonic() - killed < 60, f"no takeover: {takeover}"
                time.sleep(0.02)
            print(
                f"takeover after SIGKILL: scheduler {takeover['hourglass-scheduler']:.2f} s, binder"
                f" {takeover['hourglass-binder']:.2f} s (lease {LEASE_S:g} s, retry {RETRY_S:g} s)"
            )
            # Within a lease period of the last renewal (at most one retry before the kill), plus the
            # standby's own retry and process start-up slack on a shared machine.
            assert max(takeover.values()) < LEASE_S + 2 * RETRY_S + 2.0, takeover
            # ... and not much before it: the leader renewed every retry period from the moment it held the
            # Lease (a standby taking over early would be a second leader).
            assert min(takeover.values()) > LEASE_S - 4 * RETRY_S, takeover
            _wait(
                "the pods submitted after the kill bound",
                lambda: all("nodeName" in read_pod(api, ns, f"p{i}")["spec"] for i in range(8)),
            )
            time.sleep(1.0)  # let the binder finish writing what follows a bind (Events, Queue status)

            other = {"run-1": "run-2", "run-2": "run-1", "bind-1": "bind-2", "bind-2": "bind-1"}
            survivors = {lease: other[who] for lease, who in leaders.items()}
            assert {lease: _holder(api, ns, lease) for lease in leaders} == survivors
            for name in ("ingest", *survivors.values()):
                assert procs[name].stop() == 0, procs[name].stderr[-2000:]
            bind_out = procs[survivors["hourglass-binder"]].stdout
            assert " 0 conflicts" in bind_out, bind_out
            # A pod is bound once: one Scheduled Event each, where the engine decided.
            with FileLog(d, readonly=True) as log:
                records = decision_records(log)
            binds = Counter(dd["pod"] for r in records for dd in r["decisions"] if dd["kind"] == "Bind")
            assert binds == Counter({f"{ns}/p{i}": 1 for i in range(8)})
            for i in range(8):
                scheduled = [e for e in pod_events(api, ns, f"p{i}") if e["reason"] == "Scheduled"]
                assert len(scheduled) == 1 and scheduled[0]["count"] == 1, (i, scheduled)
            # ... and no cycle recorded twice across the hand-over.
            ids = [r["cycle_id"] for r in records]
            assert len(ids) == len(set(ids))
        finally:
            for p in procs.values():
                p.kill()
    summary = replay(load_source(d), verify=True)
    assert summary.cycles == len(records) and summary.mismatches == 0
