"""Pod grouping: the PodGroup of a pod that names none, as KAI's pod-grouper decides it.

A pod without the ``pod-group-name`` annotation gets a PodGroup derived from its **top owner**
(follow ``ownerReferences`` up, kai-spec §1.1 and §2.3). Per-kind rules (KAI's plugins):

================  ==========================================  ===============================  =========
top owner         PodGroup name                               minMember                        priority
================  ==========================================  ===============================  =========
none (bare pod)   ``pg-<pod>-<pod uid>``                      1                                train
Deployment        ``pg-<pod>-<pod uid>`` (one per pod)        1                                inference
Job               ``pg-<pod>-<job uid>`` (one per pod)        1                                train
JobSet            ``pg-<js>-<uid>[-<replicatedJob>]``         see :func:`_jobset`              train
PyTorchJob, ...   ``pg-<owner>-<uid>``                        schedulingPolicy.minAvailable,   train
                                                              else the sum of replicas
MPIJob            ``pg-<owner>-<uid>``                        same, over mpiReplicaSpecs       train
RayCluster        ``pg-<owner>-<uid>``                        head + workers (min or replicas  train
                                                              x numOfHosts), suspended skipped
other (StatefulSet, ReplicaSet, CRDs)  ``pg-<owner>-<uid>``   1                                train
================  ==========================================  ===============================  =========

Queue: label ``kai.scheduler/queue`` on the top owner, then on the pod, then label ``project``, then
``default-queue``. Priority class: label ``priorityClassName`` on the top owner or the pod, then
``pod.spec.priorityClassName``, then the per-kind default. Preemptibility: label
``kai.scheduler/preemptibility`` on the top owner, then the pod.

The functions here are pure except :func:`resolve_owners`, which reads owners through a ``get``
callable the caller supplies (the watcher passes one backed by the API server).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from ingest.kube import LABEL_PREEMPTIBILITY, LABEL_QUEUE, KubeError, check_queue_name, object_key

__all__ = [
    "DEFAULT_QUEUE",
    "MANAGED_BY",
    "OwnerGetter",
    "PodGroupPlan",
    "plan_pod_group",
    "podgroup_manifest",
    "podgroup_patch",
    "resolve_owners",
]

DEFAULT_QUEUE: Final = "default-queue"
MANAGED_BY: Final = "hourglass-ingest"
PODGROUP_API_VERSION: Final = "scheduling.run.ai/v2alpha2"
LABEL_PROJECT: Final = "project"
LABEL_PRIORITY_CLASS: Final = "priorityClassName"
LABEL_JOBSET_REPLICATED_JOB: Final = "jobset.sigs.k8s.io/replicatedjob-name"
_MAX_OWNER_DEPTH = 10

# Kubeflow training operators: kind -> the spec field holding the replica specs.
_KUBEFLOW_REPLICA_SPECS: Final = {
    "PyTorchJob": "pytorchReplicaSpecs",
    "TFJob": "tfReplicaSpecs",
    "XGBoostJob": "xgbReplicaSpecs",
    "JAXJob": "jaxReplicaSpecs",
    "MPIJob": "mpiReplicaSpecs",
}

OwnerGetter = Callable[[str, str, str, str], dict[str, Any] | None]
"""``get(api_version, kind, namespace, name)`` -> the object, or None when it cannot be read."""


@dataclass(frozen=True, slots=True)
class PodGroupPlan:
    """The PodGroup a pod belongs to, as the pod-grouper decided it."""

    name: str
    namespace: str
    min_member: int
    queue: str
    priority_class: str
    preemptibility: str | None  # "preemptible" | "non-preemptible" | None (derive from priority)
    owner: dict[str, Any] = field(default_factory=dict)  # the ownerReference the PodGroup object gets
    top_owner_kind: str = "Pod"


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def _sub(obj: dict[str, Any] | None, key: str) -> dict[str, Any]:
    """``obj[key]`` when it is an object, else an empty dict."""
    value = obj.get(key) if isinstance(obj, dict) else None
    return value if isinstance(value, dict) else {}


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    labels = _meta(obj).get("labels")
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def _controller_ref(obj: dict[str, Any]) -> dict[str, Any] | None:
    refs = [r for r in _meta(obj).get("ownerReferences") or [] if isinstance(r, dict)]
    for r in refs:
        if r.get("controller"):
            return r
    return refs[0] if refs else None


def resolve_owners(pod: dict[str, Any], get: OwnerGetter) -> list[dict[str, Any]]:
    """The owner chain of ``pod``, immediate owner first, top owner last (empty for a bare pod).

    An owner that cannot be read (deleted, or not readable with our RBAC) ends the chain; it is
    represented by a stub built from the ownerReference, so grouping still keys on its name and uid.
    """
    chain: list[dict[str, Any]] = []
    namespace = str(_meta(pod).get("namespace") or "")
    current = pod
    seen: set[str] = set()
    for _ in range(_MAX_OWNER_DEPTH):
        ref = _controller_ref(current)
        if ref is None or str(ref.get("uid")) in seen:
            break
        seen.add(str(ref.get("uid")))
        api_version, kind, name = (
            str(ref.get("apiVersion", "")),
            str(ref.get("kind", "")),
            str(ref.get("name", "")),
        )
        obj = get(api_version, kind, namespace, name)
        if obj is None:
            chain.append(
                {
                    "apiVersion": api_version,
                    "kind": kind,
                    "metadata": {"name": name, "namespace": namespace, "uid": str(ref.get("uid", ""))},
                }
            )
            break
        obj = {"apiVersion": api_version, "kind": kind, **obj}
        chain.append(obj)
        current = obj
    return chain


def _owner_ref(obj: dict[str, Any]) -> dict[str, Any]:
    meta = _meta(obj)
    return {
        "apiVersion": str(obj.get("apiVersion") or "v1"),
        "kind": str(obj.get("kind") or "Pod"),
        "name": str(meta.get("name") or ""),
        "uid": str(meta.get("uid") or ""),
    }


def _int_at(owner: dict[str, Any], path: tuple[str, ...], pod_key: str, default: int | None) -> int | None:
    """An integer field of an owner's object (None/default when absent); an error when not an integer."""
    cur: Any = owner
    for p in path:
        if not isinstance(cur, dict) or p not in cur:
            return default
        cur = cur[p]
    if isinstance(cur, bool) or not isinstance(cur, int) or cur < 0:
        where = f"{owner.get('kind')} {object_key(owner)} " + ".".join(path)
        raise _grouping_error(pod_key, where, cur, "must be a non-negative integer")
    return cur


def _grouping_error(pod_key: str, where: str, value: object, problem: str) -> KubeError:
    err = KubeError("Pod", pod_key, where, value, problem)
    err.reason = "HourglassPodGrouping"
    err.reason_code = "pod_grouping"
    return err


def _replicas_sum(owner: dict[str, Any], specs_field: str, pod_key: str) -> int:
    """minAvailable of a Kubeflow job: schedulingPolicy.minAvailable, else the sum of all replicas."""
    min_available = _int_at(owner, ("spec", "runPolicy", "schedulingPolicy", "minAvailable"), pod_key, None)
    if min_available is not None and min_available > 0:
        return min_available
    specs = _sub(owner, "spec").get(specs_field)
    if not isinstance(specs, dict) or not specs:
        raise _grouping_error(
            pod_key, f"{owner.get('kind')} {object_key(owner)} spec.{specs_field}", specs, "is missing"
        )
    total = 0
    for role in sorted(specs):
        replicas = _int_at(owner, ("spec", specs_field, role, "replicas"), pod_key, 0) or 0
        if replicas == 0:
            where = f"{owner.get('kind')} {object_key(owner)} spec.{specs_field}.{role}.replicas"
            raise _grouping_error(pod_key, where, replicas, "must be > 0")
        total += replicas
    return total


def _ray(cluster: dict[str, Any], pod_key: str) -> int:
    """Head (1) plus, per non-suspended worker group, (minReplicas if > 0 else replicas) x numOfHosts."""
    total = 1
    spec = _sub(cluster, "spec")
    for i, group in enumerate(spec.get("workerGroupSpecs") or []):
        if not isinstance(group, dict) or group.get("suspended") is True:
            continue
        wrapped = {"kind": cluster.get("kind"), "metadata": _meta(cluster), "g": group}
        replicas = _int_at(wrapped, ("g", "replicas"), pod_key, 0) or 0
        minimum = _int_at(wrapped, ("g", "minReplicas"), pod_key, 0) or 0
        hosts = _int_at(wrapped, ("g", "numOfHosts"), pod_key, 1) or 1
        if minimum > replicas:
            where = f"RayCluster {object_key(cluster)} spec.workerGroupSpecs[{i}].minReplicas"
            raise _grouping_error(pod_key, where, minimum, f"exceeds replicas {replicas}")
        total += (minimum if minimum > 0 else replicas) * hosts
    return total


def _jobset(owner: dict[str, Any], pod: dict[str, Any], pod_key: str) -> tuple[str, int]:
    """JobSet: one group per replicatedJob when startupPolicy.startupPolicyOrder is InOrder, else one for all.

    minAvailable of a replicatedJob = replicas x min(parallelism, completions if set); parallelism
    defaults to 1. A missing startupPolicy is JobSet's API default, AnyOrder.
    """
    spec = _sub(owner, "spec")
    in_order = _sub(spec, "startupPolicy").get("startupPolicyOrder")
    base = f"pg-{_meta(owner).get('name')}-{_meta(owner).get('uid')}"
    sizes: dict[str, int] = {}
    for i, rj in enumerate(spec.get("replicatedJobs") or []):
        if not isinstance(rj, dict):
            continue
        wrapped = {"kind": "JobSet", "metadata": _meta(owner), "rj": rj}
        replicas = _int_at(wrapped, ("rj", "replicas"), pod_key, 1) or 0
        parallelism = _int_at(wrapped, ("rj", "template", "spec", "parallelism"), pod_key, 1) or 0
        completions = _int_at(wrapped, ("rj", "template", "spec", "completions"), pod_key, None)
        per_job = min(parallelism, completions) if completions is not None else parallelism
        sizes[str(rj.get("name") or f"replicated-job-{i}")] = replicas * per_job
    if in_order == "InOrder":
        rj_name = _labels(pod).get(LABEL_JOBSET_REPLICATED_JOB)
        if rj_name is None or rj_name not in sizes:
            where = f"metadata.labels[{LABEL_JOBSET_REPLICATED_JOB}]"
            raise _grouping_error(pod_key, where, rj_name, "does not name a replicatedJob of the JobSet")
        return f"{base}-{rj_name}", max(sizes[rj_name], 1)
    return base, max(sum(sizes.values()), 1)


def plan_pod_group(
    pod: dict[str, Any], owners: list[dict[str, Any]], get: OwnerGetter | None = None
) -> PodGroupPlan:
    """Decide the PodGroup of ``pod`` from its owner chain (see the module doc for the rules).

    ``get`` is used only for RayJob / RayService, whose gang size lives on the RayCluster they
    created (``status.rayClusterName``). Raises :class:`KubeError` (reason ``HourglassPodGrouping``
    or an invalid queue label) when the owner's spec cannot give a group.
    """
    meta = _meta(pod)
    pod_key = object_key(pod)
    namespace = str(meta.get("namespace") or "")
    pod_name, pod_uid = str(meta.get("name") or ""), str(meta.get("uid") or "")
    top = owners[-1] if owners else None
    kind = str(top.get("kind")) if top else "Pod"
    group_api = str(top.get("apiVersion", "")).split("/")[0] if top else ""

    name = f"pg-{_meta(top).get('name')}-{_meta(top).get('uid')}" if top else f"pg-{pod_name}-{pod_uid}"
    owner_ref = _owner_ref(top) if top else _owner_ref({"apiVersion": "v1", "kind": "Pod", **pod})
    min_member = 1
    default_priority = "train"
    if top is None:
        pass
    elif kind == "Deployment" and group_api == "apps":
        name, owner_ref = f"pg-{pod_name}-{pod_uid}", _owner_ref({"apiVersion": "v1", "kind": "Pod", **pod})
        default_priority = "inference"
    elif kind == "Job" and group_api == "batch":
        name = f"pg-{pod_name}-{_meta(top).get('uid')}"
    elif kind == "JobSet":
        name, min_member = _jobset(top, pod, pod_key)
    elif kind in _KUBEFLOW_REPLICA_SPECS and group_api == "kubeflow.org":
        min_member = _replicas_sum(top, _KUBEFLOW_REPLICA_SPECS[kind], pod_key)
    elif kind == "RayCluster":
        min_member = _ray(top, pod_key)
    elif kind in ("RayJob", "RayService") and get is not None:
        status = _sub(top, "status")
        cluster_name = status.get("rayClusterName") or (status.get("activeServiceStatus") or {}).get(
            "rayClusterName"
        )
        cluster = (
            get(str(top.get("apiVersion")), "RayCluster", namespace, str(cluster_name))
            if cluster_name
            else None
        )
        if cluster is None:
            raise _grouping_error(
                pod_key,
                f"{kind} {object_key(top)} status.rayClusterName",
                cluster_name,
                "no readable RayCluster yet",
            )
        min_member = _ray({"kind": "RayCluster", **cluster}, pod_key)

    owner_labels = _labels(top) if top else {}
    pod_labels = _labels(pod)
    queue = (
        owner_labels.get(LABEL_QUEUE)
        or pod_labels.get(LABEL_QUEUE)
        or owner_labels.get(LABEL_PROJECT)
        or pod_labels.get(LABEL_PROJECT)
        or DEFAULT_QUEUE
    )
    if problem := check_queue_name(queue):
        source = LABEL_QUEUE if LABEL_QUEUE in owner_labels or LABEL_QUEUE in pod_labels else LABEL_PROJECT
        raise KubeError("Pod", pod_key, f"metadata.labels[{source}]", queue, problem)
    spec = _sub(pod, "spec")
    priority = (
        owner_labels.get(LABEL_PRIORITY_CLASS)
        or pod_labels.get(LABEL_PRIORITY_CLASS)
        or str(spec.get("priorityClassName") or "")
        or default_priority
    )
    pre = owner_labels.get(LABEL_PREEMPTIBILITY) or pod_labels.get(LABEL_PREEMPTIBILITY) or None
    if pre is not None and pre not in ("preemptible", "non-preemptible"):
        raise KubeError(
            "Pod",
            pod_key,
            f"metadata.labels[{LABEL_PREEMPTIBILITY}]",
            pre,
            "must be preemptible or non-preemptible",
        )
    return PodGroupPlan(
        name=name,
        namespace=namespace,
        min_member=max(min_member, 1),
        queue=queue,
        priority_class=priority,
        preemptibility=pre,
        owner=owner_ref,
        top_owner_kind=kind,
    )


def _spec(plan: PodGroupPlan) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "minMember": plan.min_member,
        "queue": plan.queue,
        "priorityClassName": plan.priority_class,
    }
    if plan.preemptibility:
        spec["preemptibility"] = plan.preemptibility
    return spec


def podgroup_manifest(plan: PodGroupPlan) -> dict[str, Any]:
    """The PodGroup object to create for ``plan`` (owned by the top owner, so it is garbage-collected)."""
    meta: dict[str, Any] = {
        "name": plan.name,
        "namespace": plan.namespace,
        "labels": {"app.kubernetes.io/managed-by": MANAGED_BY, LABEL_QUEUE: plan.queue},
    }
    if plan.owner.get("uid"):
        meta["ownerReferences"] = [{**plan.owner, "blockOwnerDeletion": False, "controller": False}]
    return {"apiVersion": PODGROUP_API_VERSION, "kind": "PodGroup", "metadata": meta, "spec": _spec(plan)}


def podgroup_patch(existing: dict[str, Any], plan: PodGroupPlan) -> dict[str, Any] | None:
    """A merge patch bringing an existing PodGroup's managed fields to ``plan``, or None if they match."""
    current = _sub(existing, "spec")
    wanted = _spec(plan)
    diff = {k: v for k, v in wanted.items() if current.get(k) != v}
    return {"spec": diff} if diff else None
