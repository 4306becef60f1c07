"""A KWOK cluster for the end-to-end tests, and Hourglass running against it as a user runs it.

``kwok_cluster`` (session scope) starts ``tools/kwok/cluster.sh start DIR 4``: its own etcd +
kube-apiserver (apart from ``kube_api``'s, which runs no controllers), kube-controller-manager,
kube-scheduler and KWOK playing the kubelet of four fake 8-GPU nodes (``kwok-node-0`` .. ``kwok-node-3``):
pods bound to them turn Running, deleted pods disappear, Jobs get their pods. When the binaries are missing
the tests are skipped, except under ``CI`` where the fixture builds them (``.ci/run`` builds them first).

``kwok_namespace`` (function scope) creates a namespace and, afterwards, deletes it and waits until it is
gone (the namespace controller runs here), so the next test finds every GPU free.

:class:`HourglassStack` starts ``hourglass ingest``, ``hourglass run`` and ``hourglass bind`` as separate
processes on one log directory with the cluster's kubeconfig, and stops them with SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import REPO_ROOT

KWOK_DIR = REPO_ROOT / "tools" / "kwok"
CLUSTER_SH = KWOK_DIR / "cluster.sh"
BUILDS = (REPO_ROOT / "tools" / "kube" / "build.sh", KWOK_DIR / "build.sh")
MISSING_PREREQUISITE = 2
BUILD_TIMEOUT_S = 3 * 3600
#: The fake nodes of the session's cluster and the GPUs each one has (tools/kwok/cluster.sh's default).
NODES = 4
GPUS_PER_NODE = 8
#: KAI's default PriorityClasses, as the Helm chart installs them (deploy/helm/hourglass/values.yaml).
PRIORITY_CLASSES = {"train": 50, "build-preemptible": 75, "build": 100, "inference": 125}


@dataclass(frozen=True)
class KwokCluster:
    """A running KWOK cluster: its run directory, admin kubeconfig and API server URL."""

    dir: Path
    kubeconfig: Path
    url: str

    def api_client(self) -> Any:
        """A new ``kubernetes.client.ApiClient`` for this cluster (admin)."""
        from kubernetes import config

        load: Any = config.new_client_from_config_dict  # untyped in the client library
        return load(yaml.safe_load(self.kubeconfig.read_text()), persist_config=False)

    def nodes(self, n: int) -> None:
        """Make sure fake nodes ``kwok-node-0`` .. ``kwok-node-<n-1>`` exist and are Ready."""
        run = subprocess.run(
            [str(CLUSTER_SH), "nodes", str(self.dir), str(n)], capture_output=True, text=True, timeout=600
        )
        if run.returncode != 0:
            raise RuntimeError(f"tools/kwok/cluster.sh nodes failed: {run.stderr}")


def _binaries_present() -> bool:
    kube, kwok = (
        Path(subprocess.run([str(b), "--print"], capture_output=True, text=True).stdout.strip())
        for b in BUILDS
    )
    needed = [kube / c for c in ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler")]
    return all(p.is_file() for p in [*needed, kwok / "kwok"])


def _unavailable(reason: str) -> None:
    message = f"KWOK cluster unavailable: {reason}"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI is set, so the KWOK tests must run)", pytrace=False)
    pytest.skip(message)


def start_cluster(run_dir: Path, nodes: int) -> KwokCluster:
    """Start a KWOK cluster in ``run_dir`` with ``nodes`` fake nodes (building the binaries under CI)."""
    if not _binaries_present():
        if not os.environ.get("CI"):
            _unavailable("binaries not built: run tools/kube/build.sh and tools/kwok/build.sh")
        for build in BUILDS:
            done = subprocess.run([str(build)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
            if done.returncode != 0:
                pytest.fail(f"{build} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    started = subprocess.run(
        [str(CLUSTER_SH), "start", str(run_dir), str(nodes)], capture_output=True, text=True, timeout=600
    )
    if started.returncode == MISSING_PREREQUISITE:
        _unavailable(started.stderr.strip())
    if started.returncode != 0:
        stop_cluster(run_dir)
        pytest.fail(f"tools/kwok/cluster.sh start failed:\n{started.stderr}", pytrace=False)
    env = dict(line.split("=", 1) for line in (run_dir / "env").read_text().splitlines() if "=" in line)
    return KwokCluster(dir=run_dir, kubeconfig=run_dir / "kubeconfig", url=env["KUBE_URL"])


def stop_cluster(run_dir: Path) -> None:
    """Stop every process of the cluster in ``run_dir``."""
    subprocess.run([str(CLUSTER_SH), "stop", str(run_dir)], capture_output=True, timeout=120, check=False)


@pytest.fixture(scope="session")
def kwok_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KwokCluster]:
    """A KWOK cluster with four fake 8-GPU nodes, KAI's CRDs and priority classes, for the session."""
    from tests.support.kube_objects import apply_crds

    run_dir = tmp_path_factory.mktemp("kwok")
    cluster = start_cluster(run_dir, NODES)
    try:
        with cluster.api_client() as api:
            apply_crds(api)
            ensure_priority_classes(api)
        yield cluster
    finally:
        stop_cluster(run_dir)


@pytest.fixture
def kwok_namespace(kwok_cluster: KwokCluster) -> Iterator[str]:
    """A fresh namespace; deleted afterwards, waiting until its pods are gone and their GPUs free."""
    from kubernetes import client

    name = f"kwok-{uuid.uuid4().hex[:8]}"
    with kwok_cluster.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        try:
            yield name
        finally:
            # The namespace controller takes its time; what the next test needs is the GPUs back, so the
            # pods go first, at once (KWOK removes them), and the namespace follows in the background.
            core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
            core.delete_namespace(name)
            wait_until(lambda: not core.list_namespaced_pod(name).items, 60, f"pods of {name} deleted")


def ensure_priority_classes(api: Any) -> None:
    """KAI's PriorityClasses (409: already there)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    sched = client.SchedulingV1Api(api)
    for name, value in PRIORITY_CLASSES.items():
        try:
            sched.create_priority_class(
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                }
            )
        except ApiException as e:
            if e.status != 409:
                raise


def wait_until(pred: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.2) -> None:
    """Poll ``pred`` until it holds; AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for: {what}")
        time.sleep(interval_s)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "analytics.cli", *args]


@dataclass
class HourglassStack:
    """``hourglass ingest``, ``run`` and ``bind`` as processes on one FileLog, against ``cluster``.

    Each process's stderr goes to ``<log>.<name>.err``; :meth:`logs` returns their tails for a failure
    message. Extra flags per component through ``run_args`` / ``bind_args`` / ``ingest_args``.
    """

    cluster: KwokCluster
    log_dir: Path
    run_args: Sequence[str] = ()
    bind_args: Sequence[str] = ()
    ingest_args: Sequence[str] = ()
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self) -> HourglassStack:
        """Start the three processes (the scheduler first, so it holds the log's scheduler role)."""
        kc = str(self.cluster.kubeconfig)
        log = str(self.log_dir)
        commands = {
            "run": _cli("run", "--log", log, *self.run_args),
            "bind": _cli("bind", "--log", log, "--kubeconfig", kc, *self.bind_args),
            "ingest": _cli("ingest", "--log", log, "--kubeconfig", kc, *self.ingest_args),
        }
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        for name, cmd in commands.items():
            err = open(f"{self.log_dir}.{name}.err", "wb")  # noqa: SIM115 - owned by the process
            self.procs[name] = subprocess.Popen(cmd, stderr=err, stdout=err, env=env, cwd=REPO_ROOT)
            err.close()
        return self

    def alive(self) -> bool:
        """True while all three processes run."""
        return all(p.poll() is None for p in self.procs.values())

    def logs(self, lines: int = 15) -> str:
        """The last ``lines`` of each process's stderr."""
        out = []
        for name in self.procs:
            path = Path(f"{self.log_dir}.{name}.err")
            text = path.read_text(errors="replace").splitlines() if path.exists() else []
            out.append(f"--- hourglass {name} (exit {self.procs[name].poll()}):\n" + "\n".join(text[-lines:]))
        return "\n".join(out)

    def stop(self) -> dict[str, int]:
        """SIGTERM all (ingest first, the binder last so it applies what was decided); their exit codes."""
        codes: dict[str, int] = {}
        for name in ("ingest", "run", "bind"):
            p = self.procs.get(name)
            if p is None:
                continue
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            try:
                codes[name] = p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                codes[name] = p.wait()
        return codes

    def __enter__(self) -> HourglassStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def create_objects(api: Any, docs: Sequence[dict[str, Any]], namespace: str) -> list[dict[str, Any]]:
    """Create each document as ``kubectl create -f`` would (any kind, CRDs included): namespaced ones in
    ``namespace``. Returns the created objects."""
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import ResourceNotFoundError

    dyn = DynamicClient(api)
    out = []
    for doc in docs:
        try:
            res = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        except ResourceNotFoundError:  # a CRD created after discovery was cached
            dyn.resources.invalidate_cache()
            res = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        if res.namespaced:
            out.append(res.create(body=doc, namespace=namespace).to_dict())
        else:
            out.append(res.create(body=doc).to_dict())
    return out


def pods(api: Any, ns: str) -> dict[str, Any]:
    """The namespace's pods by name."""
    from kubernetes import client

    return {p.metadata.name: p for p in client.CoreV1Api(api).list_namespaced_pod(ns).items}


def running(api: Any, ns: str, names: Sequence[str] | None = None) -> bool:
    """True when the named pods (all of the namespace's, at least one, when None) are Running on a node."""
    got = pods(api, ns)
    want = list(names) if names is not None else list(got)
    return bool(want) and all(
        n in got and got[n].status.phase == "Running" and got[n].spec.node_name for n in want
    )


def pod_events(api: Any, ns: str, name: str) -> list[tuple[str, str]]:
    """(reason, message) of every Event about pod ``ns/name``, oldest first."""
    from kubernetes import client

    evs = client.CoreV1Api(api).list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    evs.sort(key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp)
    return [(e.reason, e.message) for e in evs]


def queue_manifest(name: str, gpu_quota: int, parent: str | None = None) -> dict[str, Any]:
    """A ``scheduling.run.ai/v2`` Queue with a GPU quota (unlimited CPU and memory, no GPU limit)."""
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    spec: dict[str, Any] = {
        "resources": {
            "cpu": unlimited,
            "memory": unlimited,
            "gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
        }
    }
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def gpu_pod(name: str, queue: str, priority: str) -> dict[str, Any]:
    """A 1-GPU pod in the shape of KAI's train-priority-pod.yaml: queue and priority class as labels."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"kai.scheduler/queue": queue, "priorityClassName": priority}},
        "spec": {
            "schedulerName": "hourglass",
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
