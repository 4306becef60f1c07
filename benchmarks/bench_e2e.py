"""End to end on a KWOK cluster: how fast pods go from submitted to Running with Hourglass scheduling them.

A KWOK cluster (``tools/kwok/cluster.sh``: kube-apiserver, kube-controller-manager, kube-scheduler and KWOK's
fake 8-GPU nodes) and ``hourglass ingest``, ``run`` and ``bind`` as processes with their default flags, as a
user runs them (docs/kwok.md). Workloads, run in the order ``--workloads`` names them (repeats allowed, so
Hourglass and kube-scheduler can alternate under the same load), the namespace emptied after each:

* ``lone``: one 1-GPU pod on the idle system, ``--lone`` times (each after the previous one runs);
* ``independent``: 1,000 independent 1-GPU pods (queue ``bench-a``), submitted by 8 client threads;
* ``independent-default``: the same pods with ``schedulerName: default-scheduler``: the stock
  kube-scheduler takes them to Running on the same cluster, the floor this machine allows;
* ``reclaim``: ``bench-a`` fills every GPU, then queue ``bench-b`` (entitled to half the cluster) submits
  200 1-GPU pods: 200 of ``bench-a``'s pods are evicted and ``bench-b``'s take their place;
* ``gang``: one PodGroup of 500 1-GPU pods (``minMember`` 500); from halfway through its submission,
  ``--lone`` unrelated 1-GPU pods of another queue one by one, 0.25 s apart, from a second client thread
  (``unrelated-during-gang``), whose latency should not depend on the gang;
* ``lone-default`` and ``burst-default``: ``lone`` and ``gang`` with ``schedulerName: default-scheduler``
  (the 500 pods without a PodGroup: kube-scheduler has no gangs): how much the stock scheduler's unrelated
  pods slow down while 500 pods arrive, the floor for ``unrelated-during-gang`` on this machine;
* ``unrelated-during-reservation``: a half-GPU pod whose reservation pod never reports its GPU (KWOK runs
  no ``hourglass reserve``), so its bind waits; meanwhile ``--lone`` unrelated 1-GPU pods one by one. Only
  this workload starts the binder with ``--gpu-sharing``.

A ``bench: e2e load1=…`` line before each workload gives the machine's load averages at its start, and a
``bench: e2e cpu …`` line after it the CPU seconds each process used (control plane, KWOK, the three
Hourglass processes, the benchmark's own client), including the namespace's emptying. Two ``bench: e2e requests``
lines count the kube-apiserver's requests during the workload (its ``apiserver_request_total``, from every
client: the benchmark's creates, deletes and watch included, which are the same for both schedulers):
``requests_per_pod=`` in total, then by ``verb:resource[/subresource]``, so the calls a scheduler adds per
pod show against kube-scheduler's bind and Event.

Submit time is taken by the client when the create call returns; Running is when the benchmark's watch sees
the pod Running. One line per workload:

``bench: e2e workload=W nodes=N pods=P seconds=S pods_per_s=R p50_s=A p99_s=B max_s=C``

and one ``bench: e2e-profile`` line per workload with the median time of each hop, from the same pods:
``ingest_s`` (submit -> the pod's PodSubmitted event on the log, stamped by ingest), ``schedule_s`` (-> the
cycle record with its Bind appears on the decisions topic), ``bind_s`` (-> the watch sees spec.nodeName set
by the binder), ``run_s`` (-> KWOK reports Running).

    python benchmarks/bench_e2e.py [--nodes 128] [--independent 1000] [--gang 500] [--reclaim 200] [--lone 5]
                                   [--workloads lone,independent,independent-default,reclaim,gang]
                                   [--keep DIR] [--poll-interval S] [--reservation-timeout S]

Needs ``tools/kube/build.sh`` and ``tools/kwok/build.sh`` (cached after the first build). Takes a few minutes.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ingest.filelog import FileLog
from ingest.kube.names import ANNOTATION_GPU_CONFIGMAP, ANNOTATION_GPU_FRACTION
from ingest.log import DEFAULT_TOPICS
from scheduler.engine.record.decisions import CycleRecord
from scheduler.kube.reservation import DEFAULT_NAMESPACE as DEFAULT_RESERVATION_NAMESPACE
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
UNRELATED_SPACING_S = 0.25  # between the unrelated pods submitted while a gang arrives


def _pod(name: str, queue: str, group: str | None = None, scheduler: str = "hourglass") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": {"kai.scheduler/queue": queue}}
    if group:
        meta["annotations"] = {"pod-group-name": group}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": scheduler,
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


def _submit(api: Any, docs: list[dict[str, Any]], obs: Observer, threads: int = 8) -> float:
    """Create the pods from ``threads`` client threads; returns the seconds it took (a ceiling on pods/s)."""
    from kubernetes import client

    core = client.CoreV1Api(api)

    def one(doc: dict[str, Any]) -> None:
        core.create_namespaced_pod(NS, doc)
        obs.submitted[doc["metadata"]["name"]] = time.time()

    t = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, docs))
    return time.monotonic() - t


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
        # The slowest pod's hops: where a tail comes from, which medians hide.
        i = max(range(len(hops["ingest_s"])), key=lambda k: sum(v[k] for v in hops.values()))
        worst = " ".join(f"{k}={v[i]:.3f}" for k, v in hops.items())
        print(f"bench: e2e-profile workload={workload} slowest {worst}", flush=True)


def _empty_namespace(api: Any, obs: Observer) -> None:
    from kubernetes import client

    core = client.CoreV1Api(api)
    core.delete_collection_namespaced_pod(NS, grace_period_seconds=0)
    wait_until(lambda: not core.list_namespaced_pod(NS, limit=1).items, 300, "bench pods deleted", 0.2)


@dataclass
class Bench:
    """What every workload needs: the cluster, its API client, the observer, the Hourglass stack."""

    args: argparse.Namespace
    cluster: KwokCluster
    api: Any
    obs: Observer
    stack: HourglassStack
    work: Path
    runs: int = 0  # workloads run so far: pod names carry it, so a workload can run twice

    @property
    def gpus(self) -> int:
        return self.args.nodes * GPUS_PER_NODE

    def prefix(self, letter: str) -> str:
        self.runs += 1
        return f"{letter}{self.runs}-"

    def cpu(self) -> dict[str, float]:
        """CPU seconds used so far by each process of the benchmark (Linux ``/proc``): where the 2 cores went."""
        env = dict(
            line.split("=", 1) for line in (self.cluster.dir / "env").read_text().splitlines() if "=" in line
        )
        pids = {
            "apiserver": env.get("KUBE_APISERVER_PID"),
            "etcd": env.get("ETCD_PID"),
            "kwok": env.get("KWOK_PID"),
            "kube_scheduler": env.get("KUBE_SCHEDULER_PID"),
            "controller_manager": env.get("KUBE_CONTROLLER_MANAGER_PID"),
            **{f"hg_{name}": str(proc.pid) for name, proc in self.stack.procs.items()},
            "bench_client": str(os.getpid()),
        }
        tick = os.sysconf("SC_CLK_TCK")
        out = {}
        for name, pid in pids.items():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            out[name] = (int(fields[11]) + int(fields[12])) / tick  # utime + stime
        return out

    def cpu_report(self, workload: str, before: dict[str, float]) -> None:
        """One line: the CPU seconds each process spent during ``workload``, and their sum."""
        used = {k: v - before.get(k, 0.0) for k, v in self.cpu().items()}
        parts = " ".join(f"{k}={v:.1f}" for k, v in used.items())
        print(f"bench: e2e cpu workload={workload} total_s={sum(used.values()):.1f} {parts}", flush=True)

    def requests(self) -> dict[str, float]:
        """The kube-apiserver's request count so far by ``verb:resource[/subresource]`` (its ``/metrics``)."""
        from prometheus_client.parser import text_string_to_metric_families

        # The generated client's own request path, for its credentials; /metrics is plain text, not JSON.
        r = self.api.call_api(*self.api.param_serialize("GET", "/metrics", auth_settings=["BearerToken"]))
        r.read()
        if r.status != 200:
            raise RuntimeError(f"kube-apiserver /metrics answered {r.status}: {r.data[:200]!r}")
        text = r.data.decode()
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            if family.name != "apiserver_request":  # the parser drops a counter's ``_total``
                continue
            for sample in family.samples:
                if sample.name != "apiserver_request_total":
                    continue
                labels = sample.labels
                sub = f"/{labels['subresource']}" if labels.get("subresource") else ""
                key = f"{labels.get('verb', '?')}:{labels.get('resource', '?')}{sub}"
                out[key] = out.get(key, 0.0) + sample.value
        return out

    def requests_report(self, workload: str, pods: int, before: dict[str, float]) -> None:
        """Two lines: the apiserver requests per pod during ``workload``, in total and by verb and resource."""
        used = {k: v - before.get(k, 0.0) for k, v in self.requests().items()}
        used = {k: v for k, v in used.items() if v > 0}
        total = sum(used.values())
        per = max(pods, 1)
        print(
            f"bench: e2e requests workload={workload} pods={pods} requests={total:.0f} "
            f"requests_per_pod={total / per:.2f}",
            flush=True,
        )
        # Watches, discovery and the like round to 0.00 per pod: left out, they are not per-pod calls.
        ranked = sorted(used.items(), key=lambda kv: (-kv[1], kv[0]))
        parts = " ".join(f"{k}={v / per:.2f}" for k, v in ranked if v / per >= 0.005)
        print(f"bench: e2e requests-by-resource workload={workload} per_pod {parts}", flush=True)

    def load(self) -> None:
        """Print the machine's load averages: the cores are shared, so every figure needs its load."""
        one, five, fifteen = os.getloadavg()
        print(f"bench: e2e load1={one:.2f} load5={five:.2f} load15={fifteen:.2f}", flush=True)


def _lone(b: Bench, scheduler: str = "hourglass", workload: str = "lone") -> None:
    lone = []
    pre = b.prefix(workload)
    for i in range(b.args.lone):
        name = f"{pre}{i}"
        _submit(b.api, [_pod(name, "bench-a", scheduler=scheduler)], b.obs, threads=1)
        _wait_running(b.obs, [name], 60, b.stack)
        lone.append(name)
        time.sleep(1)
    _report(workload, b.args.nodes, b.obs, lone)
    _empty_namespace(b.api, b.obs)


def _lone_default(b: Bench) -> None:
    _lone(b, scheduler="default-scheduler", workload="lone-default")


def _independent(b: Bench, scheduler: str = "hourglass", workload: str = "independent") -> None:
    pre = b.prefix("a")
    names = [f"{pre}{i}" for i in range(b.args.independent)]
    t0 = time.time()
    took = _submit(b.api, [_pod(n, "bench-a", scheduler=scheduler) for n in names], b.obs)
    print(f"bench: e2e submit workload={workload} pods={len(names)} seconds={took:.3f}", flush=True)
    _wait_running(b.obs, names, 600, b.stack)
    _report(workload, b.args.nodes, b.obs, names, t0)
    _empty_namespace(b.api, b.obs)


def _independent_default(b: Bench) -> None:
    # The floor: the same pods on the same cluster taken to Running by the stock kube-scheduler.
    _independent(b, scheduler="default-scheduler", workload="independent-default")


def _reclaim(b: Bench) -> None:
    pre = b.prefix("r")
    full = [f"{pre}a-{i}" for i in range(b.gpus)]  # bench-a holds every GPU
    _submit(b.api, [_pod(n, "bench-a") for n in full], b.obs)
    _wait_running(b.obs, full, 600, b.stack)
    time.sleep(2)
    claimants = [f"{pre}b-{i}" for i in range(b.args.reclaim)]
    t0 = time.time()
    _submit(b.api, [_pod(n, "bench-b") for n in claimants], b.obs)
    _wait_running(b.obs, claimants, 600, b.stack)
    _report("reclaim", b.args.nodes, b.obs, claimants, t0)
    _empty_namespace(b.api, b.obs)


def _gang(b: Bench, scheduler: str = "hourglass") -> None:
    from kubernetes import client

    default = scheduler == "default-scheduler"
    pre = b.prefix("gd" if default else "g")
    group = None if default else f"{pre}gang"
    if group is not None:
        client.CustomObjectsApi(b.api).create_namespaced_custom_object(
            "scheduling.run.ai",
            "v2alpha2",
            NS,
            "podgroups",
            {
                "apiVersion": "scheduling.run.ai/v2alpha2",
                "kind": "PodGroup",
                "metadata": {"name": group},
                "spec": {"minMember": b.args.gang, "queue": "bench-b"},
            },
        )
    g = [f"{pre}{i}" for i in range(b.args.gang)]
    half = len(g) // 2
    unrelated = [f"{pre}unrelated{i}" for i in range(max(1, b.args.lone))]

    def one_by_one() -> None:
        for name in unrelated:
            _submit(b.api, [_pod(name, "bench-a", scheduler=scheduler)], b.obs, threads=1)
            time.sleep(UNRELATED_SPACING_S)

    t0 = time.time()
    _submit(b.api, [_pod(n, "bench-b", group=group, scheduler=scheduler) for n in g[:half]], b.obs)
    # Unrelated pods of another queue, one by one while the gang's second half arrives: their latency
    # should not depend on the gang.
    side = threading.Thread(target=one_by_one)
    side.start()
    _submit(b.api, [_pod(n, "bench-b", group=group, scheduler=scheduler) for n in g[half:]], b.obs)
    side.join()
    _wait_running(b.obs, [*g, *unrelated], 900, b.stack)
    _report("burst-default" if default else "gang", b.args.nodes, b.obs, g, t0)
    _report(
        "unrelated-during-burst-default" if default else "unrelated-during-gang",
        b.args.nodes,
        b.obs,
        unrelated,
    )
    _empty_namespace(b.api, b.obs)


def _unrelated_during_reservation(b: Bench) -> None:
    """A half-GPU pod whose reservation pod never reports its GPU (KWOK runs no ``hourglass reserve``),
    so its bind waits out ``--reservation-timeout``; meanwhile unrelated whole-GPU pods arrive one by one."""
    pre = b.prefix("s")
    shared = _pod(f"{pre}shared", "bench-a")
    shared["metadata"]["annotations"] = {
        ANNOTATION_GPU_FRACTION: "0.5",
        ANNOTATION_GPU_CONFIGMAP: f"{pre}shared-gpu",  # what the admission webhook would name
    }
    del shared["spec"]["containers"][0]["resources"]
    _submit(b.api, [shared], b.obs, threads=1)
    wait_until(lambda: f"{pre}shared" in b.obs.decided, 60, "the shared pod's Bind decision", 0.05)
    time.sleep(1)  # its bind is now waiting for the reservation pod
    names = []
    for i in range(b.args.lone):
        name = f"{pre}unrelated-{i}"
        _submit(b.api, [_pod(name, "bench-a")], b.obs, threads=1)
        _wait_running(b.obs, [name], 120, b.stack)
        names.append(name)
        time.sleep(0.5)
    hung = f"{pre}shared" not in b.obs.bound
    print(f"bench: e2e reservation-hung={str(hung).lower()} (the shared pod still waits for its device)")
    _report("unrelated-during-reservation", b.args.nodes, b.obs, names)
    _empty_namespace(b.api, b.obs)


RUNNERS: dict[str, Callable[[Bench], None]] = {
    "lone": _lone,
    "independent": _independent,
    "independent-default": _independent_default,
    "reclaim": _reclaim,
    "gang": _gang,
    "lone-default": _lone_default,
    "burst-default": functools.partial(_gang, scheduler="default-scheduler"),
    "unrelated-during-reservation": _unrelated_during_reservation,
}
WORKLOADS = tuple(RUNNERS)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=128)
    p.add_argument("--independent", type=int, default=1000)
    p.add_argument("--reclaim", type=int, default=200)
    p.add_argument("--gang", type=int, default=500)
    p.add_argument("--lone", type=int, default=5)
    p.add_argument(
        "--workloads",
        default="lone,independent,independent-default,reclaim,gang",
        help=f"comma-separated, run in this order, repeats allowed (of {', '.join(WORKLOADS)})",
    )
    p.add_argument("--keep", type=Path, default=None, help="keep the cluster and log in DIR (default: temp)")
    p.add_argument(
        "--poll-interval",
        type=float,
        default=None,
        help="pass --poll-interval to `hourglass run` and `bind` (default: theirs, 0.05 s each)",
    )
    p.add_argument(
        "--reservation-timeout",
        type=float,
        default=30.0,
        help="the binder's --reservation-timeout when a workload needs --gpu-sharing (default 30 s)",
    )
    args = p.parse_args(argv)
    wanted = args.workloads.split(",")
    unknown = sorted(set(wanted) - set(WORKLOADS))
    if unknown:
        p.error(f"unknown workloads {unknown}: choose from {', '.join(WORKLOADS)}")
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
    # GPU sharing only when a workload needs it: every other workload runs the binder's default flags.
    sharing = (
        ("--gpu-sharing", "--reservation-timeout", str(args.reservation_timeout))
        if "unrelated-during-reservation" in wanted
        else ()
    )
    stack = HourglassStack(cluster, work / "log", run_args=poll, bind_args=(*poll, *sharing))
    try:
        from kubernetes import client

        with cluster.api_client() as api:
            apply_crds(api)
            ensure_priority_classes(api)
            core = client.CoreV1Api(api)
            core.create_namespace({"metadata": {"name": NS}})
            if sharing:
                core.create_namespace({"metadata": {"name": DEFAULT_RESERVATION_NAMESPACE}})
            apply_queue(api, _queue("bench-a", gpus // 2))
            apply_queue(api, _queue("bench-b", gpus // 2))
            stack.start()
            obs = Observer(cluster, work / "log")
            obs.start()
            # One pod through the whole path before any figure: on a loaded machine the three processes
            # can take longer than any fixed pause to start and list the cluster.
            _submit(api, [_pod("warm-up", "bench-a")], obs, threads=1)
            _wait_running(obs, ["warm-up"], 300, stack)
            _empty_namespace(api, obs)
            time.sleep(2)  # the system is idle
            bench = Bench(args, cluster, api, obs, stack, work)
            for workload in wanted:
                bench.load()
                requests_before = bench.requests()  # first: scraping /metrics costs CPU outside the window
                before = bench.cpu()
                pods_before = len(obs.submitted)
                RUNNERS[workload](bench)
                bench.cpu_report(workload, before)
                bench.requests_report(workload, len(obs.submitted) - pods_before, requests_before)
            obs.stop()
    finally:
        stack.stop()
        print(stack.logs(lines=2), file=sys.stderr)  # each component's closing counters
        subprocess.run([str(CLUSTER_SH), "stop", str(run_dir)], capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
