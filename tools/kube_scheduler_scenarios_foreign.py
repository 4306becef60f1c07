"""Writes the kube-scheduler scenarios about what other schedulers' pods and ephemeral storage do to a node
(scheduler/conformance/scenarios/kube-scheduler/noderesources-storage/ and interpodaffinity-foreign/).

- ``noderesources-storage``: noderesources/fit_test.go ``TestStorageRequests``. Every pod, incoming and
  existing, is the Go test's pod spec read through ingest (``ingest.kube.translate.pod_requests``), so the
  cases check the ephemeral-storage sum end to end; the node is ``makeAllocatableResources(10, 20, 32, 5,
  20, 5)``. Each case is written twice: the existing pod one of ours, and one of another scheduler
  (kube-scheduler's NodeInfo counts every pod on the node).
- ``interpodaffinity-foreign``: every case of interpodaffinity/filtering_test.go
  (``TestRequiredAffinitySingleNode``, ``TestRequiredAffinityMultipleNodes``) that has existing pods, with
  those pods bound by another scheduler (``cluster.foreign_pods``): kube-scheduler's InterPodAffinity reads
  every pod on a node, so the verdicts are the Go test's, and the "existing pod's anti-affinity" cases
  check that a foreign pod's own required terms are kept and enforced.

The files are data, checked in; re-run ``PYTHONPATH=. python3 tools/kube_scheduler_scenarios_foreign.py``
after editing a table.
"""

from __future__ import annotations

import copy
import shutil
from typing import Any

import kube_scheduler_scenarios as base

Doc = dict[str, Any]
STORAGE = "noderesources-storage"
FOREIGN = "interpodaffinity-foreign"
NOTE_FOREIGN = "the existing pods are bound by another scheduler (cluster.foreign_pods)"


def _go_pod(containers: list[Doc], init: list[Doc] | None = None) -> Doc:
    """A pod object as the Go test's newResourcePod / newResourceInitPod builds it."""
    spec: Doc = {
        "containers": [{"name": f"c{i}", "resources": {"requests": r}} for i, r in enumerate(containers)]
    }
    if init is not None:
        spec["initContainers"] = [{"name": f"i{i}", "resources": {"requests": r}} for i, r in enumerate(init)]
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec}


def _requests(obj: Doc) -> Doc:
    """The scenario task fields of a pod's requests, read as ingest reads the pod."""
    from ingest.kube.translate import pod_requests

    r = pod_requests(obj)
    out: Doc = {"cpu_millicores": r.cpu_millicores, "memory_bytes": r.memory_bytes}
    if r.extended:
        out["extended"] = dict(r.extended)
    return out


def _res(cpu: int = 0, memory: int = 0, storage: int = 0) -> Doc:
    """framework.Resource{MilliCPU, Memory, EphemeralStorage} as newResourcePod writes it (every field set)."""
    # (its "pods" request is left out: the API server refuses it on a container, and so does ingest)
    return {"cpu": f"{cpu}m", "memory": str(memory), "ephemeral-storage": str(storage)}


def _storage() -> list[Doc]:
    f, t = "fit_test.go", "TestStorageRequests"
    # (case, incoming pod, existing pod, kube-scheduler's verdict)
    rows: list[tuple[str, Doc, Doc, str | None]] = [
        ("empty storage requested, and pod fits", _go_pod([_res(1, 1)]), _go_pod([_res(2, 10)]), None),
        (
            "storage ephemeral local storage request exceeds allocatable",
            _go_pod([_res(storage=25)]),
            _go_pod([_res(2, 2)]),
            "Insufficientephemeral-storage",
        ),
        (
            "ephemeral local storage is sufficient",
            _go_pod([_res(storage=5)], init=[]),
            _go_pod([_res(2, 2, 10)]),
            None,
        ),
        ("pod fits", _go_pod([_res(storage=10)]), _go_pod([_res(2, 2)]), None),
    ]
    node = base.N(
        "node",
        cpu_millicores=10,
        memory_bytes=20,
        max_pods=32,
        extended={base.A: 5, "ephemeral-storage": 20, base.HP: 5},
    )
    out: list[Doc] = []
    for foreign in (False, True):
        for name, incoming, existing, want in rows:
            used = base.E("existing", "node") | _requests(existing)
            note = "requests are ingest's reading of the Go pod specs (every container asks for ephemeral-storage)"
            base.CASES.clear()
            base.case(
                "noderesources",
                f,
                t,
                name,
                [node],
                base.pod() | _requests(incoming),
                {"node": want},
                [used],
                note,
            )
            doc = base.CASES[0][1]
            out.append(_to_foreign(doc, rename=True) if foreign else doc)
    return out


def _to_foreign(doc: Doc, rename: bool = False) -> Doc:
    """The scenario with every existing pod (each the one task of its own job) bound by another scheduler."""
    doc = copy.deepcopy(doc)
    foreign: list[Doc] = []
    jobs: list[Doc] = []
    for job in doc["jobs"]:
        if job["name"] == doc["run"]["task"]:
            jobs.append(job)
            continue
        for task in job["tasks"]:
            fp: Doc = {k: task[k] for k in ("name", "namespace", "node", "labels") if k in task}
            fp["name"] = fp["name"].lower()  # a Kubernetes name in the event contract (podA is poda)
            for k in (
                "cpu_millicores",
                "memory_bytes",
                "extended",
                "host_ports",
                "pod_affinity",
                "pod_anti_affinity",
            ):
                if task.get(k):
                    fp[k] = task[k]
            if task.get("status") == "releasing":
                fp["releasing"] = True
            foreign.append(fp)
    doc["jobs"] = jobs
    doc["cluster"]["foreign_pods"] = foreign
    note = doc["source"].get("note")
    note = f"{note}; {NOTE_FOREIGN}" if note else NOTE_FOREIGN
    names = [n["name"] for n in doc["cluster"]["nodes"]]
    if any(n != n.lower() for n in names):
        # A foreign pod's node is checked as a Kubernetes name (the event contract): nodeA becomes nodea.
        for n in doc["cluster"]["nodes"]:
            n["name"] = n["name"].lower()
        for fp in foreign:
            fp["node"] = fp["node"].lower()
        doc["expect"]["filter"] = {k.lower(): v for k, v in doc["expect"]["filter"].items()}
        note += "; node names lower-cased (nodeA is nodea)"
    doc["source"]["note"] = note
    if rename:
        doc["name"] = f"{doc['name']} (existing pod of another scheduler)"
    return doc


def _interpod_foreign() -> list[Doc]:
    base.CASES.clear()
    base._interpod_single()
    base._interpod_multi()
    return [_to_foreign(doc) for _, doc in base.CASES if len(doc["jobs"]) > 1]


def main() -> None:
    """Build both tables and write the files."""
    storage, foreign = _storage(), _interpod_foreign()
    for d in (STORAGE, FOREIGN):
        if (base.OUT / d).is_dir():
            shutil.rmtree(base.OUT / d)
    base.CASES.clear()
    base.CASES.extend([(STORAGE, d) for d in storage] + [(FOREIGN, d) for d in foreign])
    print(f"wrote {base.write()} scenarios under {base.OUT}")


if __name__ == "__main__":
    main()
