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
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.kai_workload import ensure_crd, owned_pod, owner_ref
from tests.support.kube_objects import apply_crds, make_node, make_queue, read_pod

POOL = "kai.scheduler/node-pool"


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
                make_node(api, f"{ns}-{pool}{i}", gpus=4, labels={**sel, POOL: pool})
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
                        raise AssertionError(f"{what}: {nodes}; exited: {dead}; stderr: {tails}")
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
