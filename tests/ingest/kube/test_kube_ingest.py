"""Kubernetes ingest against a real kube-apiserver (tests/support/kubeapi.py): objects in, events out.

Every test writes to its own embedded FileLog and watches its own namespace; cluster-scoped objects
(Nodes, Queues) carry the namespace name as a prefix, and assertions only look at those, because the
API server is shared by the whole session.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ingest.events import parse_event
from ingest.filelog import FileLog
from ingest.kube.client import KubeApi, KubeError
from ingest.kube.watcher import STORAGE_RESOURCES, KubeIngest
from ingest.log import DEFAULT_TOPICS
from tests.support.dra_objects import API as DRA_API
from tests.support.dra_objects import create, device_class, dra_pod, ensure, gpu_claim
from tests.support.kubeapi import APISERVER_SH, KubeAPI, _read_env
from tests.support.paths import REPO_ROOT

CRDS = REPO_ROOT / "deploy" / "crds"
QUEUES = "/apis/scheduling.run.ai/v2/queues"
TOPOLOGIES = "/apis/kai.scheduler/v1alpha1/topologies"
GPU = "nvidia.com/gpu"

# A minimal stand-in for the Kubeflow training operator's CRD: enough to create a PyTorchJob object,
# which is all the pod-grouper reads (no operator runs; the test creates the job's pods itself).
PYTORCHJOB_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "pytorchjobs.kubeflow.org"},
    "spec": {
        "group": "kubeflow.org",
        "names": {
            "kind": "PyTorchJob",
            "plural": "pytorchjobs",
            "singular": "pytorchjob",
            "listKind": "PyTorchJobList",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}


def _apply_crd(api: KubeApi, doc: dict[str, Any]) -> None:
    try:
        api.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", body=doc)
    except KubeError as exc:
        if exc.status != 409:  # already applied by another test of the session
            raise


@pytest.fixture
def kapi(kube_api: KubeAPI) -> Iterator[KubeApi]:
    with kube_api.api_client() as client:
        api = KubeApi(client)
        for path in sorted(CRDS.glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc:
                    _apply_crd(api, doc)
        _apply_crd(api, PYTORCHJOB_CRD)
        deadline = time.monotonic() + 30
        for served in (
            QUEUES,
            "/apis/scheduling.run.ai/v2alpha2/podgroups",
            "/apis/kubeflow.org/v1/pytorchjobs",
            TOPOLOGIES,
        ):
            while True:  # a new CRD serves after a moment
                try:
                    api.request("GET", served)
                    break
                except KubeError:
                    assert time.monotonic() < deadline, f"{served} not served"
                    time.sleep(0.2)
        yield api


# --------------------------------------------------------------------------- object helpers


def make_queue(api: KubeApi, name: str, parent: str | None = None, **gpu: Any) -> dict[str, Any]:
    unlimited = {"quota": 0, "limit": -1, "overQuotaWeight": 1}
    spec: dict[str, Any] = {"resources": {"gpu": {**unlimited, **gpu}, "cpu": unlimited, "memory": unlimited}}
    if parent:
        spec["parentQueue"] = parent
    body = {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}
    got: dict[str, Any] = api.request("POST", QUEUES, body=body)
    return got


def make_node(api: KubeApi, name: str, gpus: int = 8) -> None:
    api.request(
        "POST",
        "/api/v1/nodes",
        body={
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.memory": "40960"}},
        },
    )
    resources = {GPU: str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"}
    api.request(
        "PATCH",
        f"/api/v1/nodes/{name}/status",
        body={"status": {"capacity": resources, "allocatable": resources}},
        content_type="application/merge-patch+json",
    )


def make_pod(
    api: KubeApi,
    ns: str,
    name: str,
    *,
    gpus: int = 0,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "annotations": annotations or {}, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    container: dict[str, Any] = {
        "name": "main",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
    }
    if gpus:
        container["resources"]["limits"] = {GPU: str(gpus)}
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": "hourglass",
            "automountServiceAccountToken": False,
            "containers": [container],
        },
    }
    got: dict[str, Any] = api.request("POST", f"/api/v1/namespaces/{ns}/pods", body=body)
    return got


def make_topology(api: KubeApi, name: str, levels: list[str]) -> None:
    body = {
        "apiVersion": "kai.scheduler/v1alpha1",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": label} for label in levels]},
    }
    api.request("POST", TOPOLOGIES, body=body)


def bind(api: KubeApi, ns: str, pod: str, node: str) -> None:
    api.request(
        "POST",
        f"/api/v1/namespaces/{ns}/pods/{pod}/binding",
        body={
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        },
    )


def delete(api: KubeApi, path: str, grace: int | None = None) -> None:
    api.request("DELETE", path, {"gracePeriodSeconds": grace})


def events_of(log: FileLog) -> list[Any]:
    return [parse_event(r.value) for r in log.read(DEFAULT_TOPICS.events, 0, 1_000_000)]


def dead_letters(log: FileLog) -> list[dict[str, Any]]:
    return [json.loads(r.value) for r in log.read(DEFAULT_TOPICS.deadletter, 0, 1_000_000)]


def mine(events: list[Any], ns: str) -> list[Any]:
    """Events about this test's objects: in its namespace, or named with its prefix."""
    return [
        e for e in events if getattr(e, "namespace", None) == ns or str(getattr(e, "name", "")).startswith(ns)
    ]


def counts(events: list[Any]) -> Counter[tuple[str, str]]:
    return Counter((str(e.type), str(getattr(e, "name", ""))) for e in events)


def pump(ingest: KubeIngest, done: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "ingest did not deliver the expected events in time"
        ingest.step(0.2)


def new_ingest(api: KubeApi, log: FileLog, ns: str, state: Path) -> KubeIngest:
    return KubeIngest(api, log, state_path=state, namespace=ns, watch_timeout_s=5, checkpoint_interval_s=0.5)


def warnings_on(api: KubeApi, ns: str, name: str) -> list[dict[str, Any]]:
    got = api.request(
        "GET", f"/api/v1/namespaces/{ns}/events", {"fieldSelector": f"involvedObject.name={name}"}
    )
    return [e for e in got["items"] if e.get("type") == "Warning"]


# --------------------------------------------------------------------------- tests


def test_objects_become_events_and_pods_are_grouped(
    kapi: KubeApi, kube_namespace: str, tmp_path: Path
) -> None:
    ns = kube_namespace
    make_queue(kapi, f"{ns}-root")
    make_queue(kapi, f"{ns}-team", parent=f"{ns}-root", quota=2)
    make_node(kapi, f"{ns}-n1", gpus=8)
    qlabel = {"kai.scheduler/queue": f"{ns}-team"}
    make_pod(kapi, ns, "whole", gpus=1, labels=qlabel)
    make_pod(kapi, ns, "frac", annotations={"gpu-fraction": "0.5"}, labels=qlabel)
    kapi.request(
        "POST",
        f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups",
        body={
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "gang"},
            "spec": {"minMember": 2, "queue": f"{ns}-team", "priorityClassName": f"{ns}-high"},
        },
    )
    kapi.request(
        "POST",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        body={
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": f"{ns}-high"},
            "value": 1000,
        },
    )
    for i in range(2):
        make_pod(kapi, ns, f"gang-{i}", gpus=2, annotations={"pod-group-name": "gang"}, labels=qlabel)
    # A KAI-style PyTorchJob gang: its pods name no PodGroup; the grouper makes one of minMember 3.
    job = kapi.request(
        "POST",
        f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs",
        body={
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "train", "labels": qlabel},
            "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 2}}},
        },
    )
    for role in ("master-0", "worker-0", "worker-1"):
        make_pod(kapi, ns, f"train-{role}", gpus=1, owner=job)

    with FileLog(tmp_path / "log") as log:
        ingest = new_ingest(kapi, log, ns, tmp_path / "state.json")
        ingest.start()
        try:
            pump(ingest, lambda: sum(1 for e in mine(events_of(log), ns) if e.type == "PodSubmitted") == 7)
            evs = {(e.type, getattr(e, "name", "")): e for e in mine(events_of(log), ns)}
            team = evs[("QueueUpserted", f"{ns}-team")]
            assert (team.parent, team.resources.gpu.quota, team.resources.gpu.limit) == (
                f"{ns}-root",
                2000,
                None,
            )
            n1 = evs[("NodeUpserted", f"{ns}-n1")]
            assert (n1.gpus, n1.gpu_memory_mib, n1.cpu_millicores) == (8, 40960, 64000)
            assert evs[("PodSubmitted", "frac")].requests.gpu_fraction_milli == 500
            assert evs[("PodSubmitted", "whole")].requests.gpus == 1
            gang = evs[("PodGroupUpserted", "gang")]
            assert (gang.min_member, gang.priority) == (
                2,
                1000,
            )  # the PriorityClass's value, read from the cluster
            pg_name = f"pg-train-{job['metadata']['uid']}"
            train_pg = evs[("PodGroupUpserted", pg_name)]
            assert (train_pg.min_member, train_pg.queue, train_pg.priority_class) == (
                3,
                f"{ns}-team",
                "train",
            )
            assert {evs[("PodSubmitted", f"train-{r}")].pod_group for r in ("master-0", "worker-1")} == {
                pg_name
            }
            # The PodGroup exists on the server too, owned by the PyTorchJob.
            obj = kapi.request("GET", f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups/{pg_name}")
            assert obj["spec"]["minMember"] == 3
            assert obj["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]

            # Lifecycle: bound, finished, releasing (no kubelet: a bound pod stays terminating), deleted.
            bind(kapi, ns, "whole", f"{ns}-n1")
            bind(kapi, ns, "gang-0", f"{ns}-n1")
            kapi.request(
                "PATCH",
                f"/api/v1/namespaces/{ns}/pods/gang-0/status",
                body={"status": {"phase": "Succeeded"}},
                content_type="application/merge-patch+json",
            )
            delete(kapi, f"/api/v1/namespaces/{ns}/pods/whole", grace=30)
            delete(kapi, f"/api/v1/namespaces/{ns}/pods/frac")
            delete(kapi, f"/api/v1/nodes/{ns}-n1")
            want = {
                ("PodBound", "whole"),
                ("PodBound", "gang-0"),
                ("PodFinished", "gang-0"),
                ("PodReleasing", "whole"),
                ("PodDeleted", "frac"),
                ("NodeRemoved", f"{ns}-n1"),
            }
            pump(ingest, lambda: want <= set(counts(mine(events_of(log), ns))))
            time.sleep(1.0)  # let late duplicates, if any, arrive
            ingest.step(0.2)
        finally:
            ingest.stop()
        c = counts(mine(events_of(log), ns))
        assert max(c.values()) == 1, f"duplicated events: {[k for k, n in c.items() if n > 1]}"
        bound = [e for e in mine(events_of(log), ns) if e.type == "PodBound" and e.name == "whole"]
        assert bound[0].node == f"{ns}-n1"
        assert ingest.stats.podgroups_created == 3  # whole, frac, train (gang was given)


def test_restart_resumes_from_resource_versions_without_loss_or_duplicates(
    kapi: KubeApi, kube_namespace: str, tmp_path: Path
) -> None:
    ns = kube_namespace
    make_queue(kapi, f"{ns}-q")
    make_node(kapi, f"{ns}-n1")
    make_pod(kapi, ns, "a", gpus=1)
    make_pod(kapi, ns, "b", gpus=1)
    make_topology(kapi, f"{ns}-t1", ["topology.hourglass.test/rack"])
    state = tmp_path / "state.json"
    with FileLog(tmp_path / "log") as log:
        first = new_ingest(kapi, log, ns, state)
        first.start()
        pump(
            first,
            lambda: (
                {("PodSubmitted", "a"), ("PodSubmitted", "b"), ("TopologyUpserted", f"{ns}-t1")}
                <= set(counts(events_of(log)))
            ),
        )
        # A pod elsewhere moves the pods resourceVersion past our namespace's last event; the server
        # says so with a BOOKMARK (2 s before the 5 s watch timeout), which moves the stored version on.
        listed_rv = int(json.loads(state.read_text())["resource_versions"]["Pod"])
        make_pod(kapi, "default", f"{ns}-elsewhere")

        # (A bookmark can also come before that pod, at the version already stored: wait for the one that
        # moves it, as checkpointed in the state file.)
        def stored_rv() -> int:
            return int(json.loads(state.read_text())["resource_versions"]["Pod"])

        # The server's bookmark timing varies with its load (a full suite on 2 cores took > 40 s once).
        pump(first, lambda: first.stats.bookmarks >= 1 and stored_rv() > listed_rv, timeout_s=120)
        first.stop()
        assert stored_rv() > listed_rv
        # While ingest is down: a new pod, a bind, a deletion, a queue change.
        make_pod(kapi, ns, "c", gpus=1)
        bind(kapi, ns, "a", f"{ns}-n1")
        delete(kapi, f"/api/v1/namespaces/{ns}/pods/b")
        q = kapi.request("GET", f"{QUEUES}/{ns}-q")
        q["spec"]["resources"]["gpu"]["quota"] = 3
        kapi.request("PUT", f"{QUEUES}/{ns}-q", body=q)
        delete(kapi, f"{TOPOLOGIES}/{ns}-t1")  # levels are immutable: a new topology replaces it
        make_topology(kapi, f"{ns}-t2", ["topology.hourglass.test/block", "topology.hourglass.test/rack"])

        second = new_ingest(kapi, log, ns, state)
        second.start()
        want = {
            ("PodSubmitted", "c"),
            ("PodBound", "a"),
            ("PodDeleted", "b"),
            ("TopologyDeleted", f"{ns}-t1"),
            ("TopologyUpserted", f"{ns}-t2"),
        }
        try:
            pump(
                second,
                lambda: (
                    want <= set(counts(mine(events_of(log), ns))) and _queue_quota(log, f"{ns}-q") == 3000
                ),
            )
            time.sleep(1.0)
            second.step(0.2)
        finally:
            second.stop()
        # Every watch resumed from its stored resourceVersion, but the storage kinds' in-memory caches (what
        # pods' claims resolve against), which are listed on every start.
        assert second.stats.lists == len(STORAGE_RESOURCES)
        c = counts(mine(events_of(log), ns))
        assert c[("QueueUpserted", f"{ns}-q")] == 2
        assert max(c.values()) <= 2 and all(n == 1 for k, n in c.items() if k[0] != "QueueUpserted"), c


def _queue_quota(log: FileLog, name: str) -> int | None:
    ups = [e for e in events_of(log) if e.type == "QueueUpserted" and e.name == name]
    return ups[-1].resources.gpu.quota if ups else None


@pytest.fixture
def uncached_kube(kube_api: KubeAPI, tmp_path: Path) -> Iterator[tuple[KubeApi, str]]:
    """A second API server with the watch cache off, so a watch from a compacted revision gets 410.

    (With the watch cache on, kube-apiserver 1.36 answers an old resourceVersion from memory for as
    long as its cache has not rotated, which no test can wait for.) Yields the API and etcd's URL.
    """
    if kube_api.etcd_url is None:
        pytest.skip("needs the fixture's own binaries (KUBECONFIG_HOURGLASS_TEST points elsewhere)")
    run_dir = tmp_path / "kube-uncached"
    env = {**os.environ, "HOURGLASS_KUBE_APISERVER_ARGS": "--watch-cache=false"}
    started = subprocess.run(
        [str(APISERVER_SH), "start", str(run_dir)], env=env, capture_output=True, text=True, timeout=300
    )
    try:
        assert started.returncode == 0, started.stderr
        etcd_url = _read_env(run_dir / "env")["ETCD_URL"]
        with KubeAPI(kubeconfig=run_dir / "kubeconfig", url="").api_client() as client:
            api = KubeApi(client)
            for path in sorted(CRDS.glob("*.yaml")):
                for doc in yaml.safe_load_all(path.read_text()):
                    if doc:
                        _apply_crd(api, doc)
            api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "ns410"}})
            deadline = time.monotonic() + 30
            while True:
                try:
                    api.request("GET", "/apis/scheduling.run.ai/v2alpha2/podgroups")
                    api.request("GET", QUEUES)
                    break
                except KubeError:
                    assert time.monotonic() < deadline, "CRDs not served"
                    time.sleep(0.2)
            yield api, etcd_url
    finally:
        subprocess.run(
            [str(APISERVER_SH), "stop", str(run_dir)], capture_output=True, timeout=60, check=False
        )


def _compact(etcd_url: str, revision: int) -> None:
    # What kube-apiserver does every 5 minutes: etcd forgets every revision before this one.
    request = urllib.request.Request(
        f"{etcd_url}/v3/kv/compaction",
        data=json.dumps({"revision": str(revision), "physical": True}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def test_gone_resource_version_relists_and_emits_missed_changes_once(
    uncached_kube: tuple[KubeApi, str], tmp_path: Path
) -> None:
    api, etcd_url = uncached_kube
    ns = "ns410"
    make_pod(api, ns, "a")
    state = tmp_path / "state.json"
    with FileLog(tmp_path / "log") as log:
        first = new_ingest(api, log, ns, state)
        first.start()
        pump(first, lambda: ("PodSubmitted", "a") in counts(mine(events_of(log), ns)))
        first.stop()
        # While ingest is down: a new pod, a deletion, then etcd compacts away the stored revisions.
        make_pod(api, ns, "b")
        delete(api, f"/api/v1/namespaces/{ns}/pods/a")
        latest = make_pod(api, ns, "c")
        _compact(etcd_url, int(latest["metadata"]["resourceVersion"]))

        second = new_ingest(api, log, ns, state)
        second.start()
        try:
            want = {("PodSubmitted", "b"), ("PodSubmitted", "c"), ("PodDeleted", "a")}
            pump(second, lambda: want <= set(counts(mine(events_of(log), ns))))
            time.sleep(0.5)
            second.step(0.2)
        finally:
            second.stop()
        assert second.stats.relists_410 >= 1
        assert second.stats.lists >= 1
        c = counts(mine(events_of(log), ns))
        assert max(c.values()) == 1, f"duplicated: {[k for k, n in c.items() if n > 1]}"


def test_invalid_objects_get_a_warning_and_a_dead_letter_and_others_keep_flowing(
    kapi: KubeApi, kube_namespace: str, tmp_path: Path
) -> None:
    ns = kube_namespace
    bad_queue = f"{ns}-bad"
    make_queue(kapi, bad_queue, quota=0.001)  # the CRD allows it; KAI rounds it to 0 GPUs (hundredths)
    kapi.request(
        "POST",
        f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups",
        body={
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "badpg"},
            "spec": {"minMember": 1},  # the CRD allows a PodGroup without a queue; the engine cannot
        },
    )
    make_pod(kapi, ns, "badfrac", annotations={"gpu-fraction": "abc"})
    make_pod(kapi, ns, "good", annotations={"gpu-fraction": "0.25"})
    state = tmp_path / "state.json"
    with FileLog(tmp_path / "log") as log:
        ingest = new_ingest(kapi, log, ns, state)
        ingest.start()
        try:
            pump(ingest, lambda: ("PodSubmitted", "good") in counts(mine(events_of(log), ns)))
        finally:
            ingest.stop()
        dead = {d["reason_code"]: d for d in dead_letters(log) if ns in d["message"]}
        assert set(dead) == {"invalid_queue", "invalid_podgroup", "invalid_pod"}, dead
        assert "spec.resources.gpu.quota=0.001" in dead["invalid_queue"]["message"]
        assert "spec.queue=None: is required" in dead["invalid_podgroup"]["message"]
        assert "[gpu-fraction]='abc'" in dead["invalid_pod"]["message"]
        assert dead["invalid_pod"]["source_topic"] == "kube:Pod" and dead["invalid_pod"]["source_offset"] > 0

        def reasons(namespace: str, name: str) -> set[str]:
            return {w["reason"] for w in warnings_on(kapi, namespace, name)}

        assert "HourglassInvalidQueue" in reasons("default", bad_queue)
        assert reasons(ns, "badpg") == {"HourglassInvalidPodGroup"}
        assert reasons(ns, "badfrac") == {"HourglassInvalidPod"}
        assert not [
            e for e in mine(events_of(log), ns) if getattr(e, "name", "") in (bad_queue, "badpg", "badfrac")
        ]

        # A restart does not report the same errors twice; fixing the queue lets it through.
        n_dead = len(dead_letters(log))
        again = new_ingest(kapi, log, ns, state)
        again.start()
        try:
            q = kapi.request("GET", f"{QUEUES}/{bad_queue}")
            q["spec"]["resources"]["gpu"]["quota"] = 0
            kapi.request("PUT", f"{QUEUES}/{bad_queue}", body=q)
            pump(again, lambda: ("QueueUpserted", bad_queue) in counts(events_of(log)))
        finally:
            again.stop()
        assert len(dead_letters(log)) == n_dead


def test_sigkilled_ingest_command_restarts_without_loss_or_duplicates(
    kube_api: KubeAPI, kapi: KubeApi, kube_namespace: str, tmp_path: Path
) -> None:
    ns = kube_namespace
    logdir = tmp_path / "log"
    cmd = [
        sys.executable,
        "-m",
        "analytics.cli",
        "ingest",
        "--log",
        str(logdir),
        "--kubeconfig",
        str(kube_api.kubeconfig),
        "--namespace",
        ns,
        "--watch-timeout",
        "5",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}

    def logged() -> Counter[tuple[str, str]]:
        if not logdir.is_dir():  # not created yet
            return Counter()
        with FileLog(logdir, readonly=True) as log:
            return counts(mine(events_of(log), ns))

    def wait_for(what: str, done: Callable[[], bool], proc: subprocess.Popen[bytes]) -> None:
        # Progress seen in the log, not a fixed sleep: a loaded machine starts Python slowly.
        deadline = time.monotonic() + 90
        while not done():
            assert proc.poll() is None, f"ingest exited early: {proc.stderr.read() if proc.stderr else ''}"
            assert time.monotonic() < deadline, f"ingest did not log {what} in 90 s"
            time.sleep(0.2)

    proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        make_pod(kapi, ns, "p0")
        wait_for("p0", lambda: ("PodSubmitted", "p0") in logged(), proc)  # started and watching
        for i in range(1, 30):
            make_pod(kapi, ns, f"p{i}")
            if i == 14:
                time.sleep(0.5)
                proc.send_signal(signal.SIGKILL)  # mid-run, possibly mid-batch
                assert proc.wait(timeout=10) == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    delete(kapi, f"/api/v1/namespaces/{ns}/pods/p3")
    restarted = subprocess.Popen(
        cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wanted = {("PodSubmitted", f"p{i}") for i in range(30)} | {("PodDeleted", "p3")}
        wait_for("every pod and p3's deletion", lambda: wanted <= logged().keys(), restarted)
        time.sleep(1)  # a duplicate, if any, would come with the rest of the batch
        restarted.send_signal(signal.SIGTERM)
        stdout, stderr = restarted.communicate(timeout=60)
    finally:
        if restarted.poll() is None:
            restarted.kill()
            restarted.wait(timeout=10)
    assert restarted.returncode == 0, stderr[-3000:]
    assert "events appended" in stdout
    with FileLog(logdir, readonly=True) as log:
        c = counts(mine(events_of(log), ns))
    submitted = {name for (typ, name) in c if typ == "PodSubmitted"}
    assert submitted == {f"p{i}" for i in range(30)}
    assert c[("PodDeleted", "p3")] == 1
    assert max(c.values()) == 1, f"duplicated: {[k for k, n in c.items() if n > 1]}"


# --------------------------------------------------------------------------- recovery, no server needed


def _ingest_without_server(log: FileLog, state: Path) -> KubeIngest:
    # No request is made before start(), so an unconfigured client is enough for the recovery paths.
    return KubeIngest(KubeApi(None), log, state_path=state)


def test_interrupted_write_ahead_batch_is_completed_once_on_start(tmp_path: Path) -> None:
    from ingest.events import PodSubmitted, dump_event

    batch = [
        PodSubmitted(name=f"p{i}", namespace="ns", pod_group="g", at_ms=i, created_at_ms=0) for i in range(3)
    ]
    records = [[e.uid, dump_event(e).decode()] for e in batch]
    state = tmp_path / "state.json"
    with FileLog(tmp_path / "log") as log:
        log.append(DEFAULT_TOPICS.events, b"other", b"{}")  # another producer's record before the batch
        log.append(
            DEFAULT_TOPICS.events, records[0][0].encode(), records[0][1].encode()
        )  # crash after 1 of 3
        pending = {DEFAULT_TOPICS.events: {"start": 1, "records": records}}
        state.write_text(json.dumps({"version": 1, "resource_versions": {}, "pending": pending}))
        first = _ingest_without_server(log, state)
        assert first._load_state()
        assert first.stats.recovered_events == 2
        assert [r.value for r in log.read(DEFAULT_TOPICS.events, 1)] == [r[1].encode() for r in records]
        # Starting again with the same state file appends nothing more.
        second = _ingest_without_server(log, state)
        assert second._load_state()
        assert second.stats.recovered_events == 0
        assert log.end_offset(DEFAULT_TOPICS.events) == 4


def test_dedupe_state_is_rebuilt_from_the_log_without_a_state_file(tmp_path: Path) -> None:
    from ingest.events import (
        PodBound,
        PodDeleted,
        PodSubmitted,
        QueueUpserted,
        TopologyDeleted,
        TopologyUpserted,
        dump_event,
    )

    evs = [
        QueueUpserted(name="q", at_ms=1),
        TopologyUpserted(name="dc", levels=["rack"], at_ms=1),
        TopologyUpserted(name="old", levels=["rack"], at_ms=1),
        TopologyDeleted(name="old", at_ms=1),
        PodSubmitted(name="a", namespace="ns", pod_group="g", at_ms=2, created_at_ms=0),
        PodSubmitted(name="b", namespace="ns", pod_group="g", at_ms=3, created_at_ms=0),
        PodBound(name="a", namespace="ns", node="n1", at_ms=4),
        PodDeleted(name="b", namespace="ns", at_ms=5),
    ]
    with FileLog(tmp_path / "log") as log:
        log.append_many(DEFAULT_TOPICS.events, [(e.uid.encode(), dump_event(e)) for e in evs])
        log.append(DEFAULT_TOPICS.events, None, b"not json")  # tolerated, the scheduler dead-letters it
        ingest = _ingest_without_server(log, tmp_path / "missing.json")
        assert not ingest._load_state()
        ingest._rebuild_from_log()
    assert set(ingest.objects) == {"Queue/q", "Topology/dc"}
    assert ingest.pods == {
        "ns/a": {
            "uid": None,
            "group": "g",
            "node": "n1",
            "releasing": False,
            "finished": None,
            "gated": False,
        }
    }
    assert ingest.last_at_ms == 5


def test_a_dra_pod_beyond_whole_gpus_gets_the_refusal_event(
    kapi: KubeApi, kube_namespace: str, tmp_path: Path
) -> None:
    # Whole GPUs of a GPU DeviceClass are scheduled (tests/e2e/test_kube_dra.py); a claim for every device
    # of the class (allocationMode All) is not, and the refusal names the field.
    ns = kube_namespace
    ensure(kapi, f"{DRA_API}/deviceclasses", device_class())
    create(
        kapi,
        f"{DRA_API}/namespaces/{ns}/resourceclaims",
        gpu_claim("all-gpus", count=None, allocationMode="All"),
    )
    kapi.request("POST", f"/api/v1/namespaces/{ns}/pods", body=dra_pod("dra", "team-a", claim="all-gpus"))
    make_pod(kapi, ns, "plain")
    with FileLog(tmp_path / "log") as log:
        ingest = new_ingest(kapi, log, ns, tmp_path / "state.json")
        ingest.start()
        try:
            pump(ingest, lambda: ("PodSubmitted", "plain") in counts(mine(events_of(log), ns)))
            pump(ingest, lambda: any(w["reason"] == "DRANotSupported" for w in warnings_on(kapi, ns, "dra")))
        finally:
            ingest.stop()
        dead = [d for d in dead_letters(log) if f"{ns}/dra" in d["message"]]
        assert [d["reason_code"] for d in dead] == ["dra_not_supported"]
        assert "exactly.allocationMode" in dead[0]["message"] and "'All'" in dead[0]["message"]
        assert ("PodSubmitted", "dra") not in counts(mine(events_of(log), ns))


def _gpu_pod(node: str | None, annotations: dict[str, str]) -> dict[str, Any]:
    """A pod asking for 2 GPUs that names its PodGroup, as the API server would send it."""
    spec: dict[str, Any] = {
        "schedulerName": "hourglass",
        "containers": [{"name": "c", "resources": {"limits": {GPU: "2"}, "requests": {GPU: "2"}}}],
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u1",
            "annotations": {"pod-group-name": "g", **annotations},
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


BINDER = {"hourglass.io/cycle-id": "c-7", "hourglass.io/gpu-devices": "0,1"}


@pytest.mark.parametrize(
    ("updates", "devices", "why"),
    [
        # The binder's bind: seen pending without the annotation, then bound with it and the cycle id.
        ([(None, {}), ("n1", BINDER)], [0, 1], None),
        # Created already bound, with a hand-written value: not the binder's.
        ([("n1", BINDER)], [], "bound before Hourglass saw it pending"),
        # Set by the user while pending, then bound by the binder without devices (a CPU decision).
        ([(None, {"hourglass.io/gpu-devices": "0,1"}), ("n1", BINDER)], [], "set while the pod was pending"),
        # Bound by someone else (no cycle id) with the annotation.
        ([(None, {}), ("n1", {"hourglass.io/gpu-devices": "0,1"})], [], "carries no hourglass.io/cycle-id"),
        # No annotation at all: nothing to warn about.
        ([("n1", {})], [], None),
    ],
)
def test_gpu_devices_annotation_is_trusted_only_from_the_binders_bind(
    tmp_path: Path, updates: list[tuple[str | None, dict[str, str]]], devices: list[int], why: str | None
) -> None:
    from ingest.events import PodBound
    from ingest.kube.watcher import _Batch, _Changed

    with FileLog(tmp_path / "log") as log:
        ingest = KubeIngest(KubeApi(None), log, group_pods=False, clock=lambda: 1)
        batch = _Batch()
        for node, annotations in updates:
            ingest._changed(_Changed("Pod", "MODIFIED", _gpu_pod(node, annotations), ""), batch)
    binds = [e for e in batch.events if isinstance(e, PodBound)]
    assert [(b.node, b.gpu_devices) for b in binds] == [("n1", devices)]
    warnings = [m for _, _, reason, m in batch.notices if reason == "HourglassUntrustedGpuDevices"]
    if why is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and why in warnings[0] and "'0,1' ignored" in warnings[0]
