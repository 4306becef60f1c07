"""End to end on a KWOK cluster: how fast pods go from submitted to Running with Hourglass scheduling them.

A KWOK cluster (``tools/kwok/cluster.sh``: kube-apiserver, kube-controller-manager, kube-scheduler and KWOK's
fake 8-GPU nodes) and ``hourglass ingest``, ``run`` and ``bind`` as processes with their default flags, as a
user runs them (docs/kwok.md). Workloads, in this order on one cluster:

* ``lone``: one 1-GPU pod on the idle system, ``--lone`` times (each after the previous one runs);
* ``independent``: 1,000 independent 1-GPU pods (queue ``bench-a``), submitted by 8 client threads;
* ``reclaim``: ``bench-a`` is topped up to hold every GPU, then queue ``bench-b`` (entitled to half the
  cluster) submits 200 1-GPU pods: 200 of ``bench-a``'s pods are evicted and ``bench-b``'s take their place;
* ``gang``: after the namespace is emptied, one PodGroup of 500 1-GPU pods (``minMember`` 500); halfway
  through its submission one unrelated 1-GPU pod of another queue (``unrelated-during-gang``), whose
  latency should not depend on the gang.

Submit time is taken by the client when the create call returns; Running is when the benchmark's watch sees
the pod Running. One line per workload:

``bench: e2e workload=W nodes=N pods=P seconds=S pods_per_s=R p50_s=A p99_s=B max_s=C``

and one ``bench: e2e-profile`` line per workload with the median time of each hop, from the same pods:
``ingest_s`` (submit -> the pod's PodSubmitted event on the log, stamped by ingest), ``schedule_s`` (-> the
cycle record with its Bind appears on the decisions topic), ``bind_s`` (-> the watch sees spec.nodeName set
by the binder), ``run_s`` (-> KWOK reports Running).

    python benchmarks/bench_e2e.py [--nodes 128] [--independent 1000] [--gang 500] [--reclaim 200] [--lone 5]
                                   [--workloads lone,independent,reclaim,gang] [--keep DIR]
                                   [--poll-interval S]

Needs ``tools/kube/build.sh`` and ``tools/kwok/build.sh`` (cached after the first build). Takes a few minutes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from scheduler.engine.record.decisions import CycleRecord
from tests.support.kai_workload import apply_queue
from tests.support.kube_objects import apply_crds
from tests.support.kwok import (
    CLUSTER_SH,
    GPUS_PER_NODE,
    HourglassStack,
    KwokCluster,
    ensure_priority_classes,
    wait_until,
)

NS = "bench"
WORKLOADS = ("lone", "independent", "reclaim", "gang")


def _pod(name: str, queue: str, group: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": {"kai.scheduler/queue": queue}}
    if group:
        meta["annotations"] = {"pod-group-name": group}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": "hourglass",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "ubuntu",
                    "args": ["sleep", "infinity"],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


def _queue(name: str, gpu_quota: int) -> dict[str, Any]:
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {
            "resources": {
                "cpu": unlimited,
                "memory": unlimited,
                "gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
            }
        },
    }


class Observer:
    """Watches the namespace's pods (first time bound, first time Running) and the log (each pod's
    PodSubmitted event time, and when its Bind decision appeared), all in wall-clock seconds."""

    def __init__(self, cluster: KwokCluster, log_dir: Path) -> None:
        self.cluster = cluster
        self.log_dir = log_dir
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.ingested: dict[str, float] = {}
        self.decided: dict[str, float] = {}
        self.submitted: dict[str, float] = {}
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._watch, daemon=True),
            threading.Thread(target=self._tail_log, daemon=True),
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        from kubernetes import client, watch

        with self.cluster.api_client() as api:
            core = client.CoreV1Api(api)
            rv = core.list_namespaced_pod(NS).metadata.resource_version
            while not self._stop.is_set():
                w = watch.Watch()
                for e in w.stream(core.list_namespaced_pod, NS, resource_version=rv, timeout_seconds=5):
                    now = time.time()
                    pod = e["object"]
                    rv = pod.metadata.resource_version
                    name = pod.metadata.name
                    if pod.spec.node_name and name not in self.bound:
                        self.bound[name] = now
                    if pod.status.phase == "Running" and name not in self.running:
                        self.running[name] = now

    def _tail_log(self) -> None:
        while not self.log_dir.is_dir() and not self._stop.is_set():
            time.sleep(0.05)
        ev_off = dec_off = 0
        with FileLog(self.log_dir, readonly=True) as log:
            while not self._stop.is_set():
                recs = log.read(DEFAULT_TOPICS.events, ev_off, 100_000)
                for r in recs:
                    d = json.loads(r.value)
                    if d.get("type") == "PodSubmitted" and d.get("namespace") == NS:
                        self.ingested.setdefault(d["name"], d["at_ms"] / 1000)
                ev_off += len(recs)
                recs = log.read(DEFAULT_TOPICS.decisions, dec_off, 100_000)
                now = time.time()
                for r in recs:
                    for d in CycleRecord.loads(r.value).decisions:  # a log holds records as v3
                        if d.kind == "Bind" and d.pod and d.pod.startswith(f"{NS}/"):
                            self.decided.setdefault(d.pod.split("/", 1)[1], now)
                dec_off += len(recs)
                time.sleep(0.02)


def _submit(api: Any, docs: list[dict[str, Any]], obs: Observer, threads: int = 8) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api)

    def one(doc: dict[str, Any]) -> None:
        core.create_namespaced_pod(NS, doc)
        obs.submitted[doc["metadata"]["name"]] = time.time()

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, docs))


def _wait_running(obs: Observer, names: list[str], timeout_s: float, stack: HourglassStack) -> None:
    wait_until(
        lambda: all(n in obs.running for n in names) or not stack.alive(),
        timeout_s,
        f"{len(names)} pods Running",
        interval_s=0.05,
    )
    if not stack.alive():
        raise RuntimeError(stack.logs())


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def _report(workload: str, nodes: int, obs: Observer, names: list[str], t0: float | None = None) -> None:
    lat = [obs.running[n] - obs.submitted[n] for n in names]
    start = t0 if t0 is not None else min(obs.submitted[n] for n in names)
    span = max(obs.running[n] for n in names) - start
    print(
        f"bench: e2e workload={workload} nodes={nodes} pods={len(names)} seconds={span:.3f}"
        f" pods_per_s={len(names) / span:.1f} p50_s={_pct(lat, 0.5):.3f} p99_s={_pct(lat, 0.99):.3f}"
        f" max_s={max(lat):.3f}",
        flush=True,
    )
    hops: dict[str, list[float]] = {"ingest_s": [], "schedule_s": [], "bind_s": [], "run_s": []}
    for n in names:
        if n in obs.ingested and n in obs.decided and n in obs.bound:
            hops["ingest_s"].append(obs.ingested[n] - obs.submitted[n])
            hops["schedule_s"].append(obs.decided[n] - obs.ingested[n])
            hops["bind_s"].append(obs.bound[n] - obs.decided[n])
            hops["run_s"].append(obs.running[n] - obs.bound[n])
    if hops["ingest_s"]:
        med = " ".join(f"{k}={statistics.median(v):.3f}" for k, v in hops.items())
        print(f"bench: e2e-profile workload={workload} pods={len(hops['ingest_s'])} median {med}", flush=True)


def _empty_namespace(api: Any, obs: Observer) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api)
    core.delete_collection_namespaced_pod(NS, grace_period_seconds=0)
    wait_until(lambda: not core.list_namespaced_pod(NS, limit=1).items, 300, "bench pods deleted", 0.2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=128)
    p.add_argument("--independent", type=int, default=1000)
    p.add_argument("--reclaim", type=int, default=200)
    p.add_argument("--gang", type=int, default=500)
    p.add_argument("--lone", type=int, default=5)
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--keep", type=Path, default=None, help="keep the cluster and log in DIR (default: temp)")
    p.add_argument(
        "--poll-interval",
        type=float,
        default=None,
        help="pass --poll-interval to `hourglass run` and `bind` (default: theirs, 0.05 s each)",
    )
    args = p.parse_args(argv)
    wanted = args.workloads.split(",")
    gpus = args.nodes * GPUS_PER_NODE
    if max(args.independent, args.gang) > gpus or args.reclaim > gpus // 2:
        p.error(f"{args.nodes} nodes hold {gpus} GPUs: too few for the workloads asked for")
    work = args.keep or Path(tempfile.mkdtemp(prefix="hourglass-bench-e2e-"))
    run_dir = work / "cluster"
    t = time.monotonic()
    started = subprocess.run([str(CLUSTER_SH), "start", str(run_dir), str(args.nodes)], text=True)
    if started.returncode != 0:
        print("bench: e2e skipped=cluster-did-not-start (tools/kube/build.sh, tools/kwok/build.sh?)")
        return 1
    env = dict(line.split("=", 1) for line in (run_dir / "env").read_text().splitlines() if "=" in line)
    cluster = KwokCluster(dir=run_dir, kubeconfig=run_dir / "kubeconfig", url=env["KUBE_URL"])
    print(f"bench: e2e cluster nodes={args.nodes} gpus={gpus} start_s={time.monotonic() - t:.1f}", flush=True)
    poll = ("--poll-interval", str(args.poll_interval)) if args.poll_interval is not None else ()
    stack = HourglassStack(cluster, work / "log", run_args=poll, bind_args=poll)
    try:
        from kubernetes import client

        with cluster.api_client() as api:
            apply_crds(api)
            ensure_priority_classes(api)
            client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
            apply_queue(api, _queue("bench-a", gpus // 2))
            apply_queue(api, _queue("bench-b", gpus // 2))
            stack.start()
            obs = Observer(cluster, work / "log")
            obs.start()
            time.sleep(8)  # the three processes start and ingest lists the cluster: the system is idle

            if "lone" in wanted:
                lone = []
                for i in range(args.lone):
                    name = f"lone-{i}"
                    _submit(api, [_pod(name, "bench-a")], obs, threads=1)
                    _wait_running(obs, [name], 60, stack)
                    lone.append(name)
                    time.sleep(1)
                _report("lone", args.nodes, obs, lone)
                _empty_namespace(api, obs)

            a: list[str] = []
            if "independent" in wanted or "reclaim" in wanted:
                a = [f"a-{i}" for i in range(args.independent)]
                t0 = time.time()
                _submit(api, [_pod(n, "bench-a") for n in a], obs)
                _wait_running(obs, a, 600, stack)
                if "independent" in wanted:
                    _report("independent", args.nodes, obs, a, t0)

            if "reclaim" in wanted:
                top = [f"a-{i}" for i in range(args.independent, gpus)]  # bench-a holds every GPU
                _submit(api, [_pod(n, "bench-a") for n in top], obs)
                _wait_running(obs, top, 600, stack)
                time.sleep(2)
                b = [f"b-{i}" for i in range(args.reclaim)]
                t0 = time.time()
                _submit(api, [_pod(n, "bench-b") for n in b], obs)
                _wait_running(obs, b, 600, stack)
                _report("reclaim", args.nodes, obs, b, t0)
            if a:
                _empty_namespace(api, obs)

            if "gang" in wanted:
                client.CustomObjectsApi(api).create_namespaced_custom_object(
                    "scheduling.run.ai",
                    "v2alpha2",
                    NS,
                    "podgroups",
                    {
                        "apiVersion": "scheduling.run.ai/v2alpha2",
                        "kind": "PodGroup",
                        "metadata": {"name": "bench-gang"},
                        "spec": {"minMember": args.gang, "queue": "bench-b"},
                    },
                )
                g = [f"g-{i}" for i in range(args.gang)]
                half = len(g) // 2
                t0 = time.time()
                _submit(api, [_pod(n, "bench-b", group="bench-gang") for n in g[:half]], obs)
                # An unrelated pod of another queue, submitted while the gang is still arriving: its
                # latency should not depend on the gang.
                _submit(api, [_pod("unrelated-0", "bench-a")], obs, threads=1)
                _submit(api, [_pod(n, "bench-b", group="bench-gang") for n in g[half:]], obs)
                _wait_running(obs, [*g, "unrelated-0"], 900, stack)
                _report("gang", args.nodes, obs, g, t0)
                _report("unrelated-during-gang", args.nodes, obs, ["unrelated-0"])
            obs.stop()
    finally:
        stack.stop()
        print(stack.logs(lines=2), file=sys.stderr)  # each component's closing counters
        subprocess.run([str(CLUSTER_SH), "stop", str(run_dir)], capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
