"""A KAI user's cluster on the real kube-apiserver, scheduled by two Hourglass shards.

Two node pools (``kai.scheduler/node-pool: a`` and ``b``), one ``hourglass ingest`` and, per pool,
``hourglass run --node-pool`` and ``hourglass bind --node-pool``. The workloads are written as a KAI user
writes them (nothing Hourglass-specific beyond ``schedulerName``), their controllers played by the test (no
controller runs beside this API server): it creates the objects each operator would create, with their
owner references and labels.

* A JobSet in pool a (the pool label on the JobSet, which KAI copies onto the PodGroup): one PodGroup with
  KAI's two-level subgroups, every pod in pool a.
* An MPIJob with ``launcherCreationPolicy: WaitForWorkersReady`` in pool b (KAI's batch example with that
  policy): the workers start without the launcher (which the operator creates only once they run), then the
  launcher joins; every pod in pool b.
* A DRA GPU claim (``resource.k8s.io/v1``) on a pod of pool a while both pools' nodes publish devices: the pod
  binds on the pool-a node with a device and the claim shows that node's allocation.
* PodGroups with the fields of KAI v0.17 (KAI's ``examples/`` shapes): ``minMember: 0`` (no gang: a pod
  starts while its sibling cannot), root ``minSubGroup: 0`` (each subgroup its own gang), ``preemptionDelay``
  / ``stalenessGracePeriod`` as spec fields and as ``kai.scheduler/...`` annotations (read into the events
  the engine decides from), and a Topology with ``levels[].alias`` (KAI's ``examples/topology-aliases``) whose
  alias the gang's ``requiredTopologyLevel`` names: the gang lands in one rack.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ingest.events import PodGroupUpserted, TopologyUpserted, parse_event
from ingest.filelog import FileLog
from ingest.kube.client import KubeApi
from ingest.log import DEFAULT_TOPICS
from tests.support.dra_objects import (
    API,
    DRIVER,
    create,
    device_class,
    dra_pod,
    ensure,
    gpu_claim,
    resource_slice,
)
from tests.support.kai_workload import ensure_crd, owned_pod, owner_ref
from tests.support.kube_objects import apply_crds, make_node, make_queue, read_pod
from tests.support.kube_pipeline import decision_records

POOL = "kai.scheduler/node-pool"
RACK = "accelerator.nvidia.com/rack"  # the label of KAI's examples/topology-aliases
HOST = "kubernetes.io/hostname"


def _crd(group: str, kind: str, plural: str, version: str) -> dict[str, Any]:
    """A CRD's identity with a schema that keeps every field (its schema is not what this test is about)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


def _container(gpus: int) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {"name": "main", "image": "ubuntu", "resources": {"requests": {"cpu": "100m"}, "limits": limits}}


def _template(gpus: int, sel: dict[str, str]) -> dict[str, Any]:
    return {"spec": {"schedulerName": "hourglass", "nodeSelector": sel, "containers": [_container(gpus)]}}


def _podgroup(
    name: str, queue: str, pool: str, spec: dict[str, Any], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A PodGroup as KAI's examples write one (queue label and field, the pool label that picks the shard)."""
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "labels": {"kai.scheduler/queue": queue, POOL: pool},
            "annotations": annotations or {},
        },
        "spec": {"queue": queue, **spec},
    }


def _member(
    name: str, group: str, queue: str, gpus: int, sel: dict[str, str], subgroup: str | None = None
) -> dict[str, Any]:
    """A pod joining ``group`` by KAI's ``pod-group-name`` annotation (and a subgroup by its label)."""
    labels = {"kai.scheduler/queue": queue}
    if subgroup is not None:
        labels["kai.scheduler/subgroup-name"] = subgroup
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": {"pod-group-name": group}},
        "spec": _template(gpus, sel)["spec"],
    }


def _create_new_field_groups(api: Any, ns: str, queue: str, sel: dict[str, str]) -> dict[str, list[str]]:
    """KAI v0.17's PodGroup fields and an aliased Topology; returns the pods that must bind / stay pending.

    A pod of 5 GPUs fits no node (4 each): it marks a member the group must be able to start without.
    """
    from kubernetes import client

    co, core = client.CustomObjectsApi(api), client.CoreV1Api(api)

    def group(doc: dict[str, Any]) -> None:
        co.create_namespaced_custom_object("scheduling.run.ai", "v2alpha2", ns, "podgroups", doc)

    # KAI's examples/topology-aliases: the gang names its level by the alias "rack".
    co.create_cluster_custom_object(
        "kai.scheduler",
        "v1alpha1",
        "topologies",
        {
            "apiVersion": "kai.scheduler/v1alpha1",
            "kind": "Topology",
            "metadata": {"name": f"{ns}-network"},
            "spec": {"levels": [{"nodeLabel": RACK, "alias": "rack"}, {"nodeLabel": HOST, "alias": "node"}]},
        },
    )
    group(
        _podgroup(
            "aliased-topology-job",
            queue,
            "a",
            {
                "minMember": 3,
                "topologyConstraint": {"topology": f"{ns}-network", "requiredTopologyLevel": "rack"},
            },
        )
    )
    # minMember 0 (no gang) with the spec timings of KAI's examples/staleness-grace-period and preemption-delay.
    group(
        _podgroup(
            "no-gang", queue, "b", {"minMember": 0, "stalenessGracePeriod": "30s", "preemptionDelay": "2m"}
        )
    )
    # Root minSubGroup 0: no subgroup is required, each is a gang of its own; timings as annotations.
    group(
        _podgroup(
            "any-subgroup",
            queue,
            "b",
            {
                "minSubGroup": 0,  # KAI's CRD: exclusive with minMember
                "subGroups": [{"name": "big", "minMember": 1}, {"name": "small", "minMember": 1}],
            },
            annotations={
                "kai.scheduler/preemption-delay": "5m",
                "kai.scheduler/staleness-grace-period": "-1s",
            },
        )
    )
    pods = [_member(f"aliased-topology-job-{i}", "aliased-topology-job", queue, 1, sel) for i in range(3)] + [
        _member("no-gang-fits", "no-gang", queue, 1, sel),
        _member("no-gang-too-big", "no-gang", queue, 5, sel),
        _member("any-subgroup-small", "any-subgroup", queue, 1, sel, subgroup="small"),
        _member("any-subgroup-big", "any-subgroup", queue, 5, sel, subgroup="big"),
    ]
    for pod in pods:
        core.create_namespaced_pod(ns, pod)
    return {
        "topology": [f"aliased-topology-job-{i}" for i in range(3)],
        "bound_b": ["no-gang-fits", "any-subgroup-small"],
        "pending": ["no-gang-too-big", "any-subgroup-big"],
    }


def _create_dra(api: Any, ns: str, queue: str, sel: dict[str, str]) -> None:
    """A GPU DeviceClass, a device on one node of each pool (a1, b1), and a pool-a pod claiming one GPU."""
    kapi = KubeApi(api)
    ensure(kapi, f"{API}/deviceclasses", device_class())
    for node in (f"{ns}-a1", f"{ns}-b1"):
        create(kapi, f"{API}/resourceslices", resource_slice(node, ["gpu-0"]))
    create(kapi, f"{API}/namespaces/{ns}/resourceclaims", gpu_claim("dra-a"))
    pod = dra_pod("dra-a", queue, claim="dra-a", node_selector=sel)
    pod["metadata"]["labels"][POOL] = "a"  # a bare pod's shard: its label, copied onto its PodGroup
    create(kapi, f"/api/v1/namespaces/{ns}/pods", pod)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "analytics.cli", *args]


def test_kai_workloads_in_two_pools_with_two_shards(
    kube_api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kube_namespace
    sel = {"hourglass-e2e": ns}
    queue = f"{ns}-q"
    kc = str(kube_api.kubeconfig)
    d = tmp_path / "log"
    procs: dict[str, subprocess.Popen[bytes]] = {}
    with kube_api.api_client() as api:
        apply_crds(api)
        ensure_crd(api, _crd("jobset.x-k8s.io", "JobSet", "jobsets", "v1alpha2"))
        ensure_crd(api, _crd("kubeflow.org", "MPIJob", "mpijobs", "v2beta1"))
        for pool in ("a", "b"):
            for i in (1, 2):
                name = f"{ns}-{pool}{i}"
                # One rack per node: a gang required in one rack must share a node.
                make_node(api, name, gpus=4, labels={**sel, POOL: pool, RACK: f"{name}-rack", HOST: name})
        make_queue(api, queue, 16)
        co, core, batch = client.CustomObjectsApi(api), client.CoreV1Api(api), client.BatchV1Api(api)
        labels = {"kai.scheduler/queue": queue}

        # JobSet (pool a): a coordinator and two workers, AnyOrder, as in KAI's docs/batch JobSet example.
        jobset = co.create_namespaced_custom_object(
            "jobset.x-k8s.io",
            "v1alpha2",
            ns,
            "jobsets",
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {"name": "js", "labels": {**labels, POOL: "a"}},
                "spec": {
                    "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
                    "replicatedJobs": [
                        {"name": "coordinator", "replicas": 1, "template": {"spec": {"parallelism": 1}}},
                        {"name": "workers", "replicas": 1, "template": {"spec": {"parallelism": 2}}},
                    ],
                },
            },
        )
        js_pods = []
        for rj, count in (("coordinator", 1), ("workers", 2)):
            job = batch.create_namespaced_job(
                ns,
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {
                        "name": f"js-{rj}-0",
                        "ownerReferences": [owner_ref(jobset, "jobset.x-k8s.io/v1alpha2", "JobSet")],
                    },
                    "spec": {
                        "parallelism": count,
                        "template": {
                            **_template(1, sel),
                            "spec": {**_template(1, sel)["spec"], "restartPolicy": "Never"},
                        },
                    },
                },
            ).to_dict()
            ref = owner_ref({"metadata": job["metadata"]}, "batch/v1", "Job")
            for i in range(count):
                pod_labels = {
                    "jobset.sigs.k8s.io/jobset-name": "js",
                    "jobset.sigs.k8s.io/replicatedjob-name": rj,
                    "jobset.sigs.k8s.io/job-index": "0",
                }
                name = f"js-{rj}-0-{i}"
                core.create_namespaced_pod(ns, owned_pod(name, ns, _template(1, sel), pod_labels, ref))
                js_pods.append(name)

        # MPIJob (pool b) with WaitForWorkersReady: the operator makes the workers first.
        mpijob = co.create_namespaced_custom_object(
            "kubeflow.org",
            "v2beta1",
            ns,
            "mpijobs",
            {
                "apiVersion": "kubeflow.org/v2beta1",
                "kind": "MPIJob",
                "metadata": {"name": "mpi", "labels": {**labels, POOL: "b"}},
                "spec": {
                    "slotsPerWorker": 1,
                    "launcherCreationPolicy": "WaitForWorkersReady",
                    "mpiReplicaSpecs": {
                        "Launcher": {"replicas": 1, "template": _template(0, sel)},
                        "Worker": {"replicas": 2, "template": _template(2, sel)},
                    },
                },
            },
        )
        mpi_ref = owner_ref(mpijob, "kubeflow.org/v2beta1", "MPIJob")
        workers = ["mpi-worker-0", "mpi-worker-1"]
        for i, name in enumerate(workers):
            role = {
                "training.kubeflow.org/job-name": "mpi",
                "training.kubeflow.org/job-role": "worker",
                "training.kubeflow.org/replica-type": "worker",
                "training.kubeflow.org/replica-index": str(i),
            }
            core.create_namespaced_pod(ns, owned_pod(name, ns, _template(2, sel), role, mpi_ref))

        new_fields = _create_new_field_groups(api, ns, queue, sel)
        _create_dra(api, ns, queue, sel)

        try:
            procs["ingest"] = subprocess.Popen(
                _cli("ingest", "--log", str(d), "--kubeconfig", kc, "--namespace", ns),
                stdout=subprocess.DEVNULL,
                stderr=(tmp_path / "ingest.err").open("wb"),
            )
            for pool in ("a", "b"):
                procs[f"run-{pool}"] = subprocess.Popen(
                    _cli("run", "--log", str(d), "--node-pool", pool, "--period", "0"),
                    stdout=subprocess.DEVNULL,
                    stderr=(tmp_path / f"run-{pool}.err").open("wb"),
                )
                procs[f"bind-{pool}"] = subprocess.Popen(
                    _cli("bind", "--log", str(d), "--node-pool", pool, "--kubeconfig", kc),
                    stdout=subprocess.DEVNULL,
                    stderr=(tmp_path / f"bind-{pool}.err").open("wb"),
                )

            def wait_bound(names: list[str], what: str) -> dict[str, str]:
                deadline = time.monotonic() + 120
                while True:
                    nodes = {n: read_pod(api, ns, n)["spec"].get("nodeName") for n in names}
                    if all(nodes.values()):
                        return {n: str(v) for n, v in nodes.items()}
                    dead = {n: p.returncode for n, p in procs.items() if p.poll() is not None}
                    if dead or time.monotonic() > deadline:
                        tails = {
                            f.name: f.read_text(errors="replace")[-1500:] for f in tmp_path.glob("*.err")
                        }
                        said = {
                            n: [
                                c.get("message")
                                for c in read_pod(api, ns, n).get("status", {}).get("conditions") or []
                            ]
                            for n in names
                        }
                        raise AssertionError(f"{what}: {nodes} {said}; exited: {dead}; stderr: {tails}")
                    time.sleep(0.1)

            js_nodes = wait_bound(js_pods, "the JobSet's pods bound")
            assert all(n.startswith(f"{ns}-a") for n in js_nodes.values()), js_nodes
            (group,) = [
                g
                for g in co.list_namespaced_custom_object("scheduling.run.ai", "v2alpha2", ns, "podgroups")[
                    "items"
                ]
                if g["metadata"]["name"].startswith("pg-js-")
            ]
            assert group["spec"]["minSubGroup"] == 2 and group["metadata"]["labels"][POOL] == "a"
            assert {sg["name"] for sg in group["spec"]["subGroups"]} == {
                "coordinator",
                "coordinator-replica-0",
                "workers",
                "workers-replica-0",
            }

            # The workers start although the launcher does not exist yet (KAI leaves it out of the gang).
            worker_nodes = wait_bound(workers, "the MPIJob's workers bound before its launcher exists")
            assert all(n.startswith(f"{ns}-b") for n in worker_nodes.values()), worker_nodes
            launcher_job = batch.create_namespaced_job(
                ns,
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": "mpi-launcher", "ownerReferences": [mpi_ref]},
                    "spec": {
                        "template": {
                            **_template(0, sel),
                            "spec": {**_template(0, sel)["spec"], "restartPolicy": "Never"},
                        }
                    },
                },
            ).to_dict()
            role = {
                "training.kubeflow.org/job-name": "mpi",
                "training.kubeflow.org/job-role": "launcher",
                "training.kubeflow.org/replica-type": "launcher",
            }
            ref = owner_ref({"metadata": launcher_job["metadata"]}, "batch/v1", "Job")
            core.create_namespaced_pod(ns, owned_pod("mpi-launcher-0", ns, _template(0, sel), role, ref))
            launcher = wait_bound(["mpi-launcher-0"], "the MPIJob's launcher bound")
            assert launcher["mpi-launcher-0"].startswith(f"{ns}-b"), launcher

            # The DRA claim: both pools have a free device, the pod's pool decides, the claim is allocated there.
            dra_node = wait_bound(["dra-a"], "the DRA pod bound")["dra-a"]
            assert dra_node == f"{ns}-a1", dra_node
            claim = KubeApi(api).get(f"{API}/namespaces/{ns}/resourceclaims/dra-a")
            assert claim is not None
            alloc = claim["status"]["allocation"]
            assert alloc["devices"]["results"] == [
                {"request": "gpu", "driver": DRIVER, "pool": dra_node, "device": "gpu-0"}
            ]
            assert alloc["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [dra_node]
            assert [r["name"] for r in claim["status"]["reservedFor"]] == ["dra-a"]

            # The aliased required level: the gang in one rack (here one node), in its pool.
            topo_nodes = set(wait_bound(new_fields["topology"], "the aliased-topology gang bound").values())
            assert len(topo_nodes) == 1 and next(iter(topo_nodes)).startswith(f"{ns}-a"), topo_nodes
            # minMember 0 and root minSubGroup 0: a pod starts although its sibling can never fit.
            started = wait_bound(new_fields["bound_b"], "the no-gang / any-subgroup pods bound alone")
            assert all(n.startswith(f"{ns}-b") for n in started.values()), started

            def told_unschedulable(name: str) -> bool:
                conds = read_pod(api, ns, name).get("status", {}).get("conditions") or []
                return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conds)

            deadline = time.monotonic() + 60
            while not all(told_unschedulable(n) for n in new_fields["pending"]):
                assert time.monotonic() < deadline, "the 5-GPU pods were never told they are unschedulable"
                time.sleep(0.2)
            assert not any(read_pod(api, ns, n)["spec"].get("nodeName") for n in new_fields["pending"])

            # preemptionDelay honoured: a non-preemptible (build) 4-GPU pod that only preemption could place
            # (no pool-a node has 4 free) waits out its 10-minute window instead of evicting the train gangs.
            co.create_namespaced_custom_object(
                "scheduling.run.ai",
                "v2alpha2",
                ns,
                "podgroups",
                _podgroup(
                    "delayed",
                    queue,
                    "a",
                    {"minMember": 1, "priorityClassName": "build", "preemptionDelay": "10m"},
                ),
            )
            core.create_namespaced_pod(ns, _member("delayed-0", "delayed", queue, 4, sel))
            victims = [*js_pods, *new_fields["topology"]]

            def evicting() -> list[str]:
                return [n for n in victims if read_pod(api, ns, n)["metadata"].get("deletionTimestamp")]

            deadline = time.monotonic() + 60
            while not told_unschedulable("delayed-0"):
                assert not evicting(), f"evicted within the preemption delay: {evicting()}"
                assert time.monotonic() < deadline, "the delayed pod was never considered"
                time.sleep(0.2)
            time.sleep(3)  # a few more cycles
            assert not read_pod(api, ns, "delayed-0")["spec"].get("nodeName")
            assert not evicting(), f"evicted within the preemption delay: {evicting()}"
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.terminate()
            for p in procs.values():
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    # What the engine decided from: the timings (spec fields and annotations) and the aliases, as read.
    with FileLog(d, readonly=True) as log:
        events = [parse_event(r.value) for r in log.read(DEFAULT_TOPICS.events, 0, 1_000_000)]
    groups = {e.name: e for e in events if isinstance(e, PodGroupUpserted) and e.namespace == ns}
    # minMember 0 is read as KAI's max(minMember, 1): a gang of one, each pod may start alone.
    assert (groups["no-gang"].min_member, groups["no-gang"].preemption_delay_ms) == (1, 120_000)
    assert groups["no-gang"].staleness_grace_ms == 30_000
    assert groups["any-subgroup"].min_sub_group == 0
    assert (groups["any-subgroup"].preemption_delay_ms, groups["any-subgroup"].staleness_grace_ms) == (
        300_000,
        -1000,
    )
    with FileLog(d, readonly=True) as log:
        records = decision_records(log, DEFAULT_TOPICS.for_pool("a").decisions)
    assert not [x for r in records for x in r["decisions"] if x["kind"] == "Evict"]
    assert groups["delayed"].preemption_delay_ms == 600_000
    (topology,) = [e for e in events if isinstance(e, TopologyUpserted) and e.name == f"{ns}-network"]
    assert topology.aliases == {"rack": RACK, "node": HOST}
    assert groups["aliased-topology-job"].required_topology_level in ("rack", RACK)
