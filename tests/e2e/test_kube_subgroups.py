"""Issue 15's done-when line on the project's kube-apiserver: a Grove-style workload (a PodCliqueSet with
prefill and decode cliques under one rack constraint) and a LeaderWorkerSet, with only ``schedulerName``
changed, are grouped with KAI's subgroups and placed within their domains.

No Grove or LWS controller runs here, so the test plays them: it creates what they create (the Grove
operator's PodCliques, PodGang and pods with the ``grove.io/podgang`` label; the LWS leader StatefulSet,
pods and worker StatefulSet, via tests/support/kai_workload.py) with their owner references. Then
ingest -> scheduler -> binder run on one FileLog (tests/support/kube_pipeline.Pipeline).

Cluster: Topology (block, rack); rack r1 = two 4-GPU nodes, r2 = three 4-GPU nodes, r3 = one 2-GPU node.
The Grove workload (prefill 2 x 2 GPUs + decode 2 x 2 GPUs, the PodGang requiring one rack) takes 8 GPUs:
only r1 (least free that fits) or r2 hold it. The LWS (size 3, 2 GPUs each, KAI's topology annotations
requiring a rack) then fits only r2.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from tests.support.kai_workload import LWS_CRD, ensure_crd, owner_ref, play_lws_controller
from tests.support.kube_objects import apply_crds, create_topology, make_node, make_queue, read_pod
from tests.support.kube_pipeline import Pipeline, decision_records
from tests.support.paths import FIXTURES

# Label keys of this test's own (tests/e2e/test_kube_topology.py's nodes carry topology.hourglass.test/*, and
# nodes outlive a test on the shared API server: each test's topology must see only its nodes).
BLOCK, RACK = "subgroups.hourglass.test/block", "subgroups.hourglass.test/rack"
GROVE_CRDS = FIXTURES / "grove-crds.yaml"


def _pod_spec(gpus: int, sel: dict[str, str]) -> dict[str, Any]:
    """A workload's pod template spec: the only scheduler-specific field is ``schedulerName``."""
    return {
        "schedulerName": "hourglass",
        "nodeSelector": sel,  # other tests' nodes share the API server: keep to ours
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {
                    "requests": {"cpu": "100m", "memory": "128Mi", "nvidia.com/gpu": str(gpus)},
                    "limits": {"nvidia.com/gpu": str(gpus)},
                },
            }
        ],
    }


def _play_grove_operator(
    api: Any, ns: str, queue: str, topo: str, sel: dict[str, str]
) -> dict[str, list[str]]:
    """A PodCliqueSet with cliques prefill and decode (2 pods x 2 GPUs each) under one rack constraint, and
    what Grove's operator makes of it: PodCliques, the base PodGang ``disagg-0`` and the pods."""
    from kubernetes import client

    co, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    cliques = {"prefill": 2, "decode": 2}
    pcs = co.create_namespaced_custom_object(
        "grove.io",
        "v1alpha1",
        ns,
        "podcliquesets",
        {
            "apiVersion": "grove.io/v1alpha1",
            "kind": "PodCliqueSet",
            "metadata": {"name": "disagg", "namespace": ns, "labels": {"kai.scheduler/queue": queue}},
            "spec": {
                "replicas": 1,
                "template": {
                    "topologyConstraint": {"packDomain": "rack"},
                    "cliques": [
                        {"name": c, "spec": {"replicas": n, "podSpec": _pod_spec(2, sel)}}
                        for c, n in cliques.items()
                    ],
                },
            },
        },
    )
    pods: dict[str, list[str]] = {}
    podgroups = []
    for c, n in cliques.items():
        pclq = co.create_namespaced_custom_object(
            "grove.io",
            "v1alpha1",
            ns,
            "podcliques",
            {
                "apiVersion": "grove.io/v1alpha1",
                "kind": "PodClique",
                "metadata": {
                    "name": f"disagg-0-{c}",
                    "namespace": ns,
                    "ownerReferences": [owner_ref(pcs, "grove.io/v1alpha1", "PodCliqueSet")],
                },
                "spec": {"replicas": n, "minAvailable": n, "podSpec": _pod_spec(2, sel)},
            },
        )
        pods[c] = [f"disagg-0-{c}-{i}" for i in range(n)]
        podgroups.append(
            {
                "name": f"disagg-0-{c}",
                "minReplicas": n,
                "podReferences": [{"namespace": ns, "name": p} for p in pods[c]],
            }
        )
        for name in pods[c]:
            core.create_namespaced_pod(
                ns,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": name,
                        "namespace": ns,
                        "labels": {"grove.io/podgang": "disagg-0", "grove.io/podclique": f"disagg-0-{c}"},
                        "ownerReferences": [owner_ref(pclq, "grove.io/v1alpha1", "PodClique")],
                    },
                    "spec": _pod_spec(2, sel),
                },
            )
    co.create_namespaced_custom_object(
        "scheduler.grove.io",
        "v1alpha1",
        ns,
        "podgangs",
        {
            "apiVersion": "scheduler.grove.io/v1alpha1",
            "kind": "PodGang",
            "metadata": {
                "name": "disagg-0",
                "namespace": ns,
                "labels": {"kai.scheduler/queue": queue},
                "annotations": {"grove.io/topology-name": topo},
                "ownerReferences": [owner_ref(pcs, "grove.io/v1alpha1", "PodCliqueSet")],
            },
            "spec": {"podgroups": podgroups, "topologyConstraint": {"packConstraint": {"required": RACK}}},
        },
    )
    return pods


def _lws(ns: str, queue: str, topo: str, sel: dict[str, str]) -> dict[str, Any]:
    """A LeaderWorkerSet as a KAI user writes it: KAI's topology annotations, schedulerName in templates."""
    template = {"spec": _pod_spec(2, sel)}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {
            "name": "serve",
            "namespace": ns,
            "labels": {"kai.scheduler/queue": queue},
            "annotations": {
                "kai.scheduler/topology": topo,
                "kai.scheduler/topology-required-placement": RACK,
            },
        },
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 3,
                "leaderTemplate": copy.deepcopy(template),
                "workerTemplate": copy.deepcopy(template),
            },
        },
    }


def test_grove_and_lws_run_with_subgroups_within_their_racks(
    kube_api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kube_namespace
    sel = {"hourglass-e2e": ns}
    topo, queue = f"{ns}-dc", f"{ns}-q"
    racks = {
        "n1": ("r1", 4),
        "n2": ("r1", 4),
        "n3": ("r2", 4),
        "n4": ("r2", 4),
        "n5": ("r2", 4),
        "n6": ("r3", 2),
    }
    rack_of = {f"{ns}-{n}": r for n, (r, _) in racks.items()}
    with kube_api.api_client() as api:
        apply_crds(api)
        ensure_crd(api, LWS_CRD)
        for crd in yaml.safe_load_all(GROVE_CRDS.read_text()):
            ensure_crd(api, crd)
        create_topology(api, topo, [BLOCK, RACK])
        for n, (rack, gpus) in racks.items():
            make_node(api, f"{ns}-{n}", gpus=gpus, labels={**sel, BLOCK: f"{ns}-b1", RACK: f"{ns}-{rack}"})
        make_queue(api, queue, gpu_quota=30)
        grove = _play_grove_operator(api, ns, queue, topo, sel)
        co = client.CustomObjectsApi(api)
        lws = co.create_namespaced_custom_object(
            "leaderworkerset.x-k8s.io", "v1", ns, "leaderworkersets", _lws(ns, queue, topo, sel)
        )
        lws_pods = play_lws_controller(api, ns, lws)[0]
        grove_pods = [p for names in grove.values() for p in names]
        every = grove_pods + lws_pods

        with FileLog(tmp_path / "log") as log:
            p = Pipeline(api, ns, log)
            p.ingest.start()
            try:
                p.settle(lambda: all("nodeName" in read_pod(api, ns, n)["spec"] for n in every))
            finally:
                p.ingest.stop()
            jobs = {
                d["pod"]: d["job"]
                for rec in decision_records(log)
                for d in rec["decisions"]
                if d["kind"] == "Bind"
            }
            dead = [json.loads(r.value) for r in log.read(DEFAULT_TOPICS.deadletter, 0, 100)]
        assert not dead, dead
        node = {n: read_pod(api, ns, n)["spec"]["nodeName"] for n in every}
        # Each workload within one rack: Grove in r1 (the least free rack that holds its 8 GPUs), LWS in r2.
        assert {rack_of[node[n]] for n in grove_pods} == {"r1"}, node
        assert {rack_of[node[n]] for n in lws_pods} == {"r2"}, node

        pgs = {
            g["metadata"]["name"]: g
            for g in co.list_namespaced_custom_object("scheduling.run.ai", "v2alpha2", ns, "podgroups")[
                "items"
            ]
        }
        gang_uid = co.get_namespaced_custom_object(
            "scheduler.grove.io", "v1alpha1", ns, "podgangs", "disagg-0"
        )["metadata"]["uid"]
        grove_pg = pgs[f"pg-disagg-0-{gang_uid}"]
        assert grove_pg["spec"]["topologyConstraint"] == {"topology": topo, "requiredTopologyLevel": RACK}
        assert grove_pg["spec"]["subGroups"] == [
            {"name": "disagg-0-prefill", "minMember": 2},
            {"name": "disagg-0-decode", "minMember": 2},
        ]
        assert {jobs[f"{ns}/{n}"] for n in grove_pods} == {f"{ns}/pg-disagg-0-{gang_uid}"}
        lws_pg = pgs[f"pg-serve-{lws['metadata']['uid']}-group-0"]
        assert lws_pg["spec"]["subGroups"] == [
            {"name": "leader", "minMember": 1},
            {"name": "workers", "minMember": 2},
        ]
        assert lws_pg["spec"]["topologyConstraint"] == {"topology": topo, "requiredTopologyLevel": RACK}
        # The engine saw each pod in its subgroup (the pod-grouper's kai.scheduler/subgroup-name label).
        events = [
            json.loads(r.value) for r in FileLog(tmp_path / "log").read(DEFAULT_TOPICS.events, 0, 100_000)
        ]
        sub = {
            e["name"]: (e.get("labels") or {}).get("kai.scheduler/subgroup-name")
            for e in events
            if e["type"] == "PodSubmitted"
        }
        assert {n: sub[n] for n in every} == {
            **{n: f"disagg-0-{c}" for c, names in grove.items() for n in names},
            lws_pods[0]: "leader",
            **{n: "workers" for n in lws_pods[1:]},
        }
