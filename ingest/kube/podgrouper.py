"""Pod grouping: the PodGroup of a pod that names none, as KAI's pod-grouper decides it.

A pod without the ``pod-group-name`` annotation gets a PodGroup derived from its **top owner**
(follow ``ownerReferences`` up, kai-spec §1.1 and §2.3).
Per-kind rules (KAI's plugins; docs/ingest.md has the full table):

* bare pod: ``pg-<pod>-<pod uid>``, 1, train. Deployment: one per pod, inference.
* Job: one per pod (``pg-<pod>-<job uid>``), 1, train; with ``kai.scheduler/batch-min-member: N`` on the
  Job, one gang ``pg-<job>-<uid>`` of N. CronJob: one per run, the pod's Job, ``pg-<job>-<job uid>``.
* JobSet: one PodGroup with a parent subgroup per replicatedJob and a leaf per replica (:func:`_jobset`).
* LeaderWorkerSet: one gang per group replica, ``pg-<lws>-<uid>-group-<i>`` of ``leaderWorkerTemplate.size``
  (:func:`_lws`), with KAI's subgroups ``leader`` (1) and ``workers`` (size - 1) (:func:`_lws_subgroups`;
  LWS segments, ``subGroupPolicy.subGroupSize`` or ``kai.scheduler/segment-size`` on the worker template,
  are not built: refused naming the field).
* Grove (PodCliqueSet, PodClique, ...): the PodGang of the pod's ``grove.io/podgang`` label, one subgroup
  per PodClique with its ``minReplicas`` and pack constraint (:func:`_grove`).
* Knative Service: one gang per Revision of its ``min-scale``, inference. Notebook: build.
* Argo Workflow, Kubeflow TrainJob, Dynamo DynamoGraphDeployment: the top owner is skipped, the next owner down (or the pod) is grouped
  with the skipped owner's labels. Spark pods (``spark-app-name`` + ``spark-app-selector``) without an
  operator: one group named by the selector.
* TFJob, XGBoostJob, JAXJob, MPIJob: ``schedulingPolicy.minAvailable``, else the sum of replicas; an MPIJob
  with ``launcherCreationPolicy: WaitForWorkersReady`` leaves the launcher out until it exists
  (:func:`_group_mpi`). PyTorchJob: ``minAvailable``, else ``elasticPolicy.minReplicas``, else the sum, with
  KAI's ``master`` / ``worker`` (/ ``worker-<i>`` segment) subgroups (:func:`_pytorch_subgroups`).
  RayCluster (RayJob, RayService): head + workers, a subgroup each (:func:`_ray`). Anything else: ``pg-<owner>-<uid>``, 1, train.

``kai.scheduler/skip-podgrouper: "true"`` on the pod or an owner: no PodGroup is made
(:func:`skip_podgrouper`; the watcher then requires the pod's ``pod-group-name``).

Topology: ``kai.scheduler/topology``, ``-required-placement`` and ``-preferred-placement`` annotations on the
top owner (the pod when it has none) become the PodGroup's ``spec.topologyConstraint``.

Subgroups: a plan's ``subgroups`` become ``spec.subGroups``; ``pod_subgroup`` is the subgroup the pod joins,
which the watcher gives the pod as KAI's ``kai.scheduler/subgroup-name`` label in its ``PodSubmitted`` event
(the Pod object itself is not patched).

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

from ingest.kube.names import (
    ANNOTATION_TOPOLOGY,
    ANNOTATION_TOPOLOGY_PREFERRED,
    ANNOTATION_TOPOLOGY_REQUIRED,
    LABEL_NODE_POOL,
    LABEL_PREEMPTIBILITY,
    LABEL_QUEUE,
)
from ingest.kube.translate import InvalidObject, check_queue_name, object_key

__all__ = [
    "ANNOTATION_MIN_MEMBER",
    "ANNOTATION_SKIP_PODGROUPER",
    "DEFAULT_QUEUE",
    "LABEL_SUBGROUP",
    "MANAGED_BY",
    "OwnerGetter",
    "PodGroupPlan",
    "plan_pod_group",
    "podgroup_manifest",
    "podgroup_patch",
    "resolve_owners",
    "skip_podgrouper",
]

DEFAULT_QUEUE: Final = "default-queue"
MANAGED_BY: Final = "hourglass-ingest"
PODGROUP_API_VERSION: Final = "scheduling.run.ai/v2alpha2"
LABEL_PROJECT: Final = "project"
LABEL_PRIORITY_CLASS: Final = "priorityClassName"
LABEL_JOBSET_REPLICATED_JOB: Final = "jobset.sigs.k8s.io/replicatedjob-name"
LABEL_JOBSET_JOB_INDEX: Final = "jobset.sigs.k8s.io/job-index"
#: KubeRay's pod label naming the pod's group: ``headgroup`` or a worker group's name.
LABEL_RAY_GROUP: Final = "ray.io/group"
RAY_HEAD_GROUP: Final = "headgroup"
#: On a Job or JobSet: the gang size (KAI's min-member override), an integer >= 1.
ANNOTATION_MIN_MEMBER: Final = "kai.scheduler/batch-min-member"
#: "true" on the pod or any owner: PodGroups are made elsewhere; the pod must name its own.
ANNOTATION_SKIP_PODGROUPER: Final = "kai.scheduler/skip-podgrouper"
LABEL_LWS_GROUP_INDEX: Final = "leaderworkerset.sigs.k8s.io/group-index"
LABEL_LWS_WORKER_INDEX: Final = "leaderworkerset.sigs.k8s.io/worker-index"
ANNOTATION_LWS_SIZE: Final = "leaderworkerset.sigs.k8s.io/size"
LABEL_KNATIVE_REVISION: Final = "serving.knative.dev/revision"
ANNOTATION_KNATIVE_MIN_SCALE: Final = "autoscaling.knative.dev/min-scale"
LABEL_SPARK_APP_NAME: Final = "spark-app-name"
LABEL_SPARK_APP_SELECTOR: Final = "spark-app-selector"
#: Grove: the PodGang a pod belongs to (set by the Grove operator), and the PodGang's topology name.
LABEL_GROVE_PODGANG: Final = "grove.io/podgang"
ANNOTATION_GROVE_TOPOLOGY: Final = "grove.io/topology-name"
GROVE_PODGANG_API: Final = "scheduler.grove.io/v1alpha1"
_GROVE_KINDS: Final = frozenset(
    {
        ("grove.io", "PodCliqueSet"),
        ("grove.io", "PodGangSet"),
        ("grove.io", "PodClique"),
        ("grove.io", "PodCliqueScalingGroup"),
    }
)
#: The pod label that puts a pod in a subgroup of its PodGroup (KAI).
LABEL_SUBGROUP: Final = "kai.scheduler/subgroup-name"
_MAX_OWNER_DEPTH = 10

#: (API group, kind) whose pods KAI groups by the next owner down (or the pod itself): KAI's
#: skip-top-owner grouper. The skipped owner's labels are inherited (queue, priority, ...).
# KAI's hub maps these to its skipTopOwnerGrouper (every served version; for Dynamo, v1alpha1 and v1beta1).
_SKIP_TOP_OWNER: Final = frozenset(
    {
        ("argoproj.io", "Workflow"),
        ("trainer.kubeflow.org", "TrainJob"),
        ("nvidia.com", "DynamoGraphDeployment"),
    }
)

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
    # spec.topologyConstraint from the workload's kai.scheduler/topology* annotations (empty = none).
    topology_constraint: dict[str, str] = field(default_factory=dict)
    # spec.subGroups (KAI's CRD form: name, minMember, parent, topologyConstraint) and the subgroup this pod
    # joins (its kai.scheduler/subgroup-name label); empty / None = no subgroups.
    subgroups: tuple[dict[str, Any], ...] = ()
    pod_subgroup: str | None = None
    # spec.minSubGroup: how many of the top-level subgroups must be satisfied (None: not set).
    min_sub_group: int | None = None
    # The kai.scheduler/node-pool label the PodGroup carries, which puts the job in that pool's shard.
    node_pool: str | None = None


_TOPOLOGY_ANNOTATIONS: Final = (
    ("topology", ANNOTATION_TOPOLOGY),
    ("requiredTopologyLevel", ANNOTATION_TOPOLOGY_REQUIRED),
    ("preferredTopologyLevel", ANNOTATION_TOPOLOGY_PREFERRED),
)


def _topology_constraint(workload: dict[str, Any]) -> dict[str, str]:
    """``spec.topologyConstraint`` from KAI's annotations on the workload (empty values left out)."""
    ann = _annotations(workload)
    return {f: ann[a].strip() for f, a in _TOPOLOGY_ANNOTATIONS if ann.get(a, "").strip()}


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


def _grouping_error(pod_key: str, where: str, value: object, problem: str) -> InvalidObject:
    err = InvalidObject("Pod", pod_key, where, value, problem)
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


LABEL_KUBEFLOW_REPLICA_TYPE: Final = "training.kubeflow.org/replica-type"
LABEL_KUBEFLOW_REPLICA_INDEX: Final = "training.kubeflow.org/replica-index"
LABEL_KUBEFLOW_JOB_ROLE: Final = "training.kubeflow.org/job-role"
#: On a PyTorchJob's pod or its Worker template: split the workers into segments of this many pods (KAI).
ANNOTATION_SEGMENT_SIZE: Final = "kai.scheduler/segment-size"
ANNOTATION_SEGMENT_REQUIRED: Final = "kai.scheduler/segment-topology-required-placement"
ANNOTATION_SEGMENT_PREFERRED: Final = "kai.scheduler/segment-topology-preferred-placement"


def _pytorch_min_member(job: dict[str, Any], pod_key: str) -> int:
    """A PyTorchJob's gang: ``schedulingPolicy.minAvailable``, else ``elasticPolicy.minReplicas``, else the
    sum of the replicas (KAI's PyTorch grouper: an elastic job starts with its minimum, not all replicas)."""
    min_available = _int_at(job, ("spec", "runPolicy", "schedulingPolicy", "minAvailable"), pod_key, None)
    if min_available is not None and min_available > 0:
        return min_available
    min_replicas = _int_at(job, ("spec", "elasticPolicy", "minReplicas"), pod_key, None)
    if min_replicas is not None:
        return max(min_replicas, 1)
    return _replicas_sum(job, "pytorchReplicaSpecs", pod_key)


def _worker_template_annotation(specs: dict[str, Any], key: str) -> str:
    ann = _sub(_sub(_sub(specs, "Worker"), "template"), "metadata").get("annotations")
    value = ann.get(key) if isinstance(ann, dict) else None
    return str(value) if value else ""


def _pytorch_subgroups(
    job: dict[str, Any], pod: dict[str, Any], total: int, pod_key: str
) -> tuple[tuple[dict[str, Any], ...], str | None]:
    """KAI's PyTorchJob subgroups: ``master`` (its replicas) and ``worker`` (the rest of the gang), the workers
    split into ``worker-<i>`` segments under ``worker`` when ``kai.scheduler/segment-size`` is set (on the pod,
    else on the Worker template), each segment with the segment topology constraint."""
    specs = _sub(_sub(job, "spec"), "pytorchReplicaSpecs")
    where = f"PyTorchJob {object_key(job)} spec.pytorchReplicaSpecs"
    master = _int_at(job, ("spec", "pytorchReplicaSpecs", "Master", "replicas"), pod_key, 0) or 0
    role = _labels(pod).get(LABEL_KUBEFLOW_REPLICA_TYPE)
    subgroups: list[dict[str, Any]] = []
    joins: str | None = None
    if "Master" in specs and master > 0:
        subgroups.append({"name": "master", "minMember": master})
        joins = "master" if role == "master" else None
    if "Worker" not in specs:
        return tuple(subgroups), joins
    workers = _int_at(job, ("spec", "pytorchReplicaSpecs", "Worker", "replicas"), pod_key, 1) or 0
    worker_min = max(0, total - master)
    subgroups.append({"name": "worker", "minMember": worker_min})
    raw = _annotations(pod).get(ANNOTATION_SEGMENT_SIZE) or _worker_template_annotation(
        specs, ANNOTATION_SEGMENT_SIZE
    )
    if not raw:
        return tuple(subgroups), "worker" if role == "worker" else joins
    if not raw.strip().isdigit() or int(raw) <= 0:
        raise _grouping_error(
            pod_key, f"{where} annotation {ANNOTATION_SEGMENT_SIZE}", raw, "must be a positive integer"
        )
    size = int(raw)
    segments = -(-workers // size)
    topology = (
        _annotations(pod).get(ANNOTATION_TOPOLOGY)
        or _worker_template_annotation(specs, ANNOTATION_TOPOLOGY)
        or _annotations(job).get(ANNOTATION_TOPOLOGY, "")
    )
    constraint: dict[str, str] = {}
    if topology:
        for key, annotation in (
            ("requiredTopologyLevel", ANNOTATION_SEGMENT_REQUIRED),
            ("preferredTopologyLevel", ANNOTATION_SEGMENT_PREFERRED),
        ):
            value = _annotations(pod).get(annotation) or _worker_template_annotation(specs, annotation)
            if value:
                constraint[key] = value
    for i in range(segments):
        entry: dict[str, Any] = {
            "name": f"worker-{i}",
            "parent": "worker",
            "minMember": min(size, workers - i * size),
        }
        if constraint:
            entry["topologyConstraint"] = {"topology": topology, **constraint}
        subgroups.append(entry)
    if role == "worker":
        index = _labels(pod).get(LABEL_KUBEFLOW_REPLICA_INDEX, "")
        if not index.isdigit():
            raise _grouping_error(
                pod_key,
                f"metadata.labels[{LABEL_KUBEFLOW_REPLICA_INDEX}]",
                index or None,
                "is required on a worker of a segmented PyTorchJob (an integer)",
            )
        joins = f"worker-{int(index) // size}"
    return tuple(subgroups), joins


def _mpi_launcher_exists(job: dict[str, Any], pod: dict[str, Any], get: OwnerGetter | None) -> bool:
    """Whether an MPIJob's launcher exists yet: the pod being grouped is it, or mpi-operator's launcher Job
    (``<mpijob>-launcher``) can be read. KAI lists the launcher pods; this reads the one object the
    operator creates for it, so the grouping does not need a pod list."""
    if _labels(pod).get(LABEL_KUBEFLOW_JOB_ROLE) == "launcher" or (
        _labels(pod).get(LABEL_KUBEFLOW_REPLICA_TYPE) == "launcher"
    ):
        return not _meta(pod).get("deletionTimestamp")
    if get is None:
        return False
    namespace = str(_meta(job).get("namespace") or _meta(pod).get("namespace") or "")
    launcher = get("batch/v1", "Job", namespace, f"{_meta(job).get('name')}-launcher")
    return launcher is not None and not _meta(launcher).get("deletionTimestamp")


def _ray_constraint(
    spec: dict[str, Any], cluster: dict[str, Any], where: str, pod_key: str
) -> dict[str, str]:
    constraint = _template_constraint(spec)
    if constraint and "topology" not in constraint:
        annotations = f"{where}.template.metadata.annotations[{ANNOTATION_TOPOLOGY}]"
        raise _grouping_error(pod_key, annotations, None, "is required when a placement level is set")
    return constraint


def _ray(cluster: dict[str, Any], pod_key: str) -> tuple[int, tuple[dict[str, Any], ...]]:
    """The gang and KAI's subgroups of a RayCluster: ``headgroup`` (1) and one per worker group that is not
    suspended and wants pods, named by its ``groupName`` (else ``worker-group-<i>``), of (minReplicas if > 0
    else replicas) x numOfHosts; each subgroup's topology constraint from its template's annotations."""
    spec = _sub(cluster, "spec")
    key = object_key(cluster)
    head: dict[str, Any] = {"name": RAY_HEAD_GROUP, "minMember": 1}
    head_spec = _sub(spec, "headGroupSpec")
    if constraint := _ray_constraint(head_spec, cluster, f"RayCluster {key} spec.headGroupSpec", pod_key):
        head["topologyConstraint"] = constraint
    subgroups = [head]
    total = 1
    for i, group in enumerate(spec.get("workerGroupSpecs") or []):
        if not isinstance(group, dict) or group.get("suspended") is True:
            continue
        where = f"RayCluster {key} spec.workerGroupSpecs[{i}]"
        wrapped = {"kind": cluster.get("kind"), "metadata": _meta(cluster), "g": group}
        replicas = _int_at(wrapped, ("g", "replicas"), pod_key, 0) or 0
        minimum = _int_at(wrapped, ("g", "minReplicas"), pod_key, 0) or 0
        hosts = _int_at(wrapped, ("g", "numOfHosts"), pod_key, 1)
        hosts = 1 if hosts is None else hosts
        if minimum > replicas:
            raise _grouping_error(pod_key, f"{where}.minReplicas", minimum, f"exceeds replicas {replicas}")
        if minimum == 0 and replicas == 0:
            continue
        size = (minimum if minimum > 0 else replicas) * hosts
        total += size
        name = (
            group.get("groupName")
            if isinstance(group.get("groupName"), str) and group.get("groupName")
            else None
        )
        entry: dict[str, Any] = {"name": name or f"worker-group-{i}", "minMember": size}
        if constraint := _ray_constraint(group, cluster, where, pod_key):
            entry["topologyConstraint"] = constraint
        subgroups.append(entry)
    return total, tuple(subgroups)


def _ray_pod_subgroup(pod: dict[str, Any], subgroups: tuple[dict[str, Any], ...]) -> str | None:
    """The subgroup of a Ray pod: its ``ray.io/group`` label when that names one (KAI leaves a pod whose
    group is unknown out of every subgroup, and so does this)."""
    group = _labels(pod).get(LABEL_RAY_GROUP)
    return group if group is not None and any(sg["name"] == group for sg in subgroups) else None


@dataclass(frozen=True, slots=True)
class _JobSetGroups:
    """A JobSet's one PodGroup: the root's ``minSubGroup``, its subgroups and the leaf the pod joins."""

    name: str
    min_sub_group: int
    subgroups: tuple[dict[str, Any], ...]
    pod_subgroup: str


def _template_annotation(spec: dict[str, Any], key: str) -> str:
    """An annotation of a replica spec's pod or Job template (``template.metadata.annotations[key]``)."""
    value = _annotations(_sub(spec, "template")).get(key)
    return value.strip() if value else ""


def _template_constraint(spec: dict[str, Any]) -> dict[str, str]:
    """A subgroup's topologyConstraint from its template's KAI topology annotations: empty without a
    required or preferred level (a topology alone constrains nothing); a level without a topology is
    returned as is, for the caller to refuse or drop as its kind's grouper does."""
    constraint = {f: _template_annotation(spec, a) for f, a in _TOPOLOGY_ANNOTATIONS}
    constraint = {k: v for k, v in constraint.items() if v}
    if "requiredTopologyLevel" not in constraint and "preferredTopologyLevel" not in constraint:
        return {}
    return constraint


def _jobset(owner: dict[str, Any], pod: dict[str, Any], pod_key: str) -> _JobSetGroups:
    """JobSet: one PodGroup ``pg-<js>-<uid>`` with a two-level subgroup tree, as KAI's current grouper.

    One parent subgroup per replicatedJob (``minSubGroup`` = its replicas, default 1) and one leaf per
    replica, ``<rj>-replica-<i>``, of ``minMember`` = the Job template's parallelism (default 1), or its
    template's ``kai.scheduler/batch-min-member`` (applied even above the parallelism), with the template's
    topology annotations as the leaf's constraint. The root needs every replicatedJob (AnyOrder, JobSet's
    default) or one (InOrder: the JobSet controller starts them one at a time); the JobSet's own
    ``batch-min-member`` sets that count instead, clamped to the number of replicatedJobs. The pod joins
    the leaf named by its ``replicatedjob-name`` and ``job-index`` labels.
    """
    spec = _sub(owner, "spec")
    meta = _meta(owner)
    key = object_key(owner)
    if not meta.get("name") or not meta.get("uid"):
        raise _grouping_error(pod_key, f"JobSet {key} metadata", None, "needs a name and a uid")
    jobs = spec.get("replicatedJobs") or []
    if not isinstance(jobs, list) or not jobs:
        raise _grouping_error(pod_key, f"JobSet {key} spec.replicatedJobs", None, "has no replicatedJobs")
    subgroups: list[dict[str, Any]] = []
    for i, rj in enumerate(jobs):
        where = f"JobSet {key} spec.replicatedJobs[{i}]"
        if not isinstance(rj, dict):
            raise _grouping_error(pod_key, where, rj, "is not an object")
        rj_name = rj.get("name")
        if not isinstance(rj_name, str) or not rj_name:
            raise _grouping_error(pod_key, f"{where}.name", rj_name, "is required")
        wrapped = {"kind": "JobSet", "metadata": meta, "rj": rj}
        replicas = _int_at(wrapped, ("rj", "replicas"), pod_key, 1)
        parallelism = _int_at(wrapped, ("rj", "template", "spec", "parallelism"), pod_key, 1)
        leaf_min = parallelism if parallelism is not None else 1
        raw = _template_annotation(rj, ANNOTATION_MIN_MEMBER)
        if raw:
            if not raw.isdigit() or int(raw) < 1:
                where_ann = f"{where}.template.metadata.annotations[{ANNOTATION_MIN_MEMBER}]"
                raise _grouping_error(pod_key, where_ann, raw, "must be an integer >= 1")
            leaf_min = int(raw)
        count = replicas if replicas is not None else 1
        if count == 0:
            continue  # no Job, no pods: a subgroup nothing can ever satisfy is left out
        subgroups.append({"name": rj_name, "minSubGroup": count})
        constraint = _template_constraint(rj)
        if "topology" not in constraint:
            constraint = {}  # KAI's JobSet grouper: levels without a topology are no constraint
        for idx in range(count):
            leaf: dict[str, Any] = {
                "name": f"{rj_name}-replica-{idx}",
                "parent": rj_name,
                "minMember": leaf_min,
            }
            if constraint:
                leaf["topologyConstraint"] = constraint
            subgroups.append(leaf)
    parents = sum(1 for sg in subgroups if "parent" not in sg)
    override = _min_member_override(owner, pod_key)
    if parents == 0:
        raise _grouping_error(pod_key, f"JobSet {key} spec.replicatedJobs", None, "every one has 0 replicas")
    if override is not None:
        root = min(override, parents)
    elif _sub(spec, "startupPolicy").get("startupPolicyOrder") == "InOrder":
        root = 1
    else:
        root = parents
    labels = _labels(pod)
    rj_label, index = labels.get(LABEL_JOBSET_REPLICATED_JOB), labels.get(LABEL_JOBSET_JOB_INDEX)
    if not rj_label:
        raise _grouping_error(
            pod_key, f"metadata.labels[{LABEL_JOBSET_REPLICATED_JOB}]", rj_label, "is required"
        )
    if not index:
        raise _grouping_error(pod_key, f"metadata.labels[{LABEL_JOBSET_JOB_INDEX}]", index, "is required")
    joins = f"{rj_label}-replica-{index}"
    if not any(sg["name"] == joins for sg in subgroups):
        raise _grouping_error(
            pod_key, f"metadata.labels[{LABEL_JOBSET_JOB_INDEX}]", index, f"names no replica of {rj_label!r}"
        )
    return _JobSetGroups(f"pg-{meta.get('name')}-{meta.get('uid')}", root, tuple(subgroups), joins)


def _annotations(obj: dict[str, Any] | None) -> dict[str, str]:
    ann = _meta(obj).get("annotations") if isinstance(obj, dict) else None
    return {str(k): str(v) for k, v in ann.items()} if isinstance(ann, dict) else {}


def _api_group(obj: dict[str, Any] | None) -> str:
    api_version = str(obj.get("apiVersion", "")) if isinstance(obj, dict) else ""
    return api_version.split("/")[0] if "/" in api_version else ""


def skip_podgrouper(pod: dict[str, Any], owners: list[dict[str, Any]]) -> str | None:
    """Where ``kai.scheduler/skip-podgrouper: "true"`` is set (``Pod ns/p``, ``Job ns/j``), or None.

    KAI's contract for external PodGroups: such a pod joins the PodGroup its ``pod-group-name``
    annotation names, and the pod-grouper creates or rewrites nothing for it.
    """
    for obj, kind in [(pod, "Pod"), *((o, str(o.get("kind"))) for o in owners)]:
        if _annotations(obj).get(ANNOTATION_SKIP_PODGROUPER, "").strip().lower() == "true":
            return f"{kind} {object_key(obj)}"
    return None


def _min_member_override(obj: dict[str, Any], pod_key: str) -> int | None:
    """``kai.scheduler/batch-min-member`` of a Job / JobSet: None when absent, an error unless an int >= 1."""
    raw = _annotations(obj).get(ANNOTATION_MIN_MEMBER)
    if raw is None:
        return None
    where = f"{obj.get('kind')} {object_key(obj)} metadata.annotations[{ANNOTATION_MIN_MEMBER}]"
    try:
        value = int(raw.strip(), 10)
    except ValueError:
        raise _grouping_error(pod_key, where, raw, "must be an integer >= 1") from None
    if value < 1:
        raise _grouping_error(pod_key, where, raw, "must be an integer >= 1")
    return value


def _refuse_lws_segments(lws: dict[str, Any], pod_key: str) -> None:
    """KAI splits an LWS group's workers into topology segments (``docs/topology/segments.md``); Hourglass
    does not build them, and grouping without them would drop the segment's topology constraint: refused."""
    template = _sub(_sub(lws, "spec"), "leaderWorkerTemplate")
    size = _sub(template, "subGroupPolicy").get("subGroupSize")
    if size is not None:
        where = f"LeaderWorkerSet {object_key(lws)} spec.leaderWorkerTemplate.subGroupPolicy.subGroupSize"
        raise _grouping_error(
            pod_key, where, size, "topology segments of a LeaderWorkerSet are not supported"
        )
    worker_meta = _sub(_sub(template, "workerTemplate"), "metadata")
    raw = (worker_meta.get("annotations") or {}).get(ANNOTATION_SEGMENT_SIZE)
    if raw is not None:
        where = (
            f"LeaderWorkerSet {object_key(lws)} spec.leaderWorkerTemplate.workerTemplate.metadata."
            f"annotations[{ANNOTATION_SEGMENT_SIZE}]"
        )
        raise _grouping_error(pod_key, where, raw, "topology segments of a LeaderWorkerSet are not supported")


def _lws(lws: dict[str, Any], pod: dict[str, Any], pod_key: str) -> tuple[str, int]:
    """LeaderWorkerSet: one gang per group replica, ``pg-<lws>-<uid>-group-<group-index>``.

    minMember is ``spec.leaderWorkerTemplate.size`` (leader + workers). With ``startupPolicy: LeaderReady``
    a leader (worker-index 0) that is not bound yet is a gang of 1, so it can start first (KAI).
    """
    name = f"pg-{_meta(lws).get('name')}-{_meta(lws).get('uid')}"
    size = _int_at(lws, ("spec", "leaderWorkerTemplate", "size"), pod_key, None)
    if size is None or size < 1:
        where = f"LeaderWorkerSet {object_key(lws)} spec.leaderWorkerTemplate.size"
        raise _grouping_error(pod_key, where, size, "must be an integer >= 1")
    policy = _sub(lws, "spec").get("startupPolicy") or "LeaderCreated"
    if policy not in ("LeaderCreated", "LeaderReady"):
        where = f"LeaderWorkerSet {object_key(lws)} spec.startupPolicy"
        raise _grouping_error(pod_key, where, policy, "must be LeaderCreated or LeaderReady")
    _refuse_lws_segments(lws, pod_key)
    labels = _labels(pod)
    min_member = size
    if policy == "LeaderReady":
        raw_size = _annotations(pod).get(ANNOTATION_LWS_SIZE)
        if raw_size is not None and raw_size.strip().isdigit():
            min_member = int(raw_size)
        is_leader = labels.get(LABEL_LWS_WORKER_INDEX) == "0"
        if is_leader and not _sub(pod, "spec").get("nodeName"):
            min_member = 1
    group_index = labels.get(LABEL_LWS_GROUP_INDEX, "")
    if group_index.isdigit():
        name = f"{name}-group-{int(group_index)}"
    return name, min_member


def _lws_subgroups(min_member: int, pod: dict[str, Any]) -> tuple[tuple[dict[str, Any], ...], str]:
    """KAI's LWS subgroups (no segmentation): ``leader`` (1 pod) and ``workers`` (the rest of the gang, when
    there is one), and the pod's subgroup (worker-index 0 is the leader)."""
    subgroups: list[dict[str, Any]] = [{"name": "leader", "minMember": 1}]
    if min_member > 1:
        subgroups.append({"name": "workers", "minMember": min_member - 1})
    is_leader = _labels(pod).get(LABEL_LWS_WORKER_INDEX) == "0"
    return tuple(subgroups), "leader" if is_leader else "workers"


def _pack_constraint(obj: dict[str, Any], topology: str, pod_key: str, where: str) -> dict[str, str]:
    """A Grove ``topologyConstraint.packConstraint`` ({required, preferred}) as KAI's topologyConstraint."""
    pack = _sub(_sub(obj, "topologyConstraint"), "packConstraint")
    out = {}
    for grove_key, kai_key in (
        ("required", "requiredTopologyLevel"),
        ("preferred", "preferredTopologyLevel"),
    ):
        value = pack.get(grove_key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise _grouping_error(
                pod_key, f"{where}.topologyConstraint.packConstraint.{grove_key}", value, "must be a string"
            )
        out[kai_key] = value
    if out and not topology:
        raise _grouping_error(
            pod_key,
            f"{where}.topologyConstraint",
            out,
            f"needs a topology name (annotation {ANNOTATION_GROVE_TOPOLOGY} or {ANNOTATION_TOPOLOGY} on the PodGang)",
        )
    return {"topology": topology, **out} if out else {}


def _grove(
    pod: dict[str, Any], get: OwnerGetter | None, pod_key: str
) -> tuple[dict[str, Any], int, tuple[dict[str, Any], ...], str | None, dict[str, str]]:
    """Grove: the PodGang named by the pod's ``grove.io/podgang`` label is the PodGroup (KAI's Grove grouper).

    Returns (PodGang, minMember, subgroups, the pod's subgroup, the PodGang's topologyConstraint). Each of
    ``spec.podgroups`` (one per PodClique) is a subgroup of ``minReplicas`` pods, holding the pods its
    ``podReferences`` name; ``spec.topologyConstraintGroupConfigs`` with ``podGroupNames`` become their
    parents; ``topologyConstraint.packConstraint`` (required / preferred level) at each of these levels
    becomes that level's constraint on the topology named by the PodGang's ``grove.io/topology-name`` (else
    ``kai.scheduler/topology``) annotation. minMember is the sum of the podgroups' minReplicas.
    """
    namespace = str(_meta(pod).get("namespace") or "")
    gang_name = _labels(pod).get(LABEL_GROVE_PODGANG)
    if not gang_name:
        raise _grouping_error(
            pod_key,
            f"metadata.labels[{LABEL_GROVE_PODGANG}]",
            None,
            "is required on a Grove pod (the PodGang it belongs to)",
        )
    gang = get(GROVE_PODGANG_API, "PodGang", namespace, gang_name) if get is not None else None
    if gang is None:
        raise _grouping_error(
            pod_key, f"PodGang {namespace}/{gang_name}", gang_name, "no readable PodGang yet"
        )
    gang = {"apiVersion": GROVE_PODGANG_API, "kind": "PodGang", **gang}
    ann = _annotations(gang)
    topology = ann.get(ANNOTATION_GROVE_TOPOLOGY) or ann.get(ANNOTATION_TOPOLOGY) or ""
    spec = _sub(gang, "spec")
    where = f"PodGang {namespace}/{gang_name} spec"
    constraint = _pack_constraint(spec, topology, pod_key, where)
    parents: dict[str, str] = {}
    subgroups: list[dict[str, Any]] = []
    for i, cfg in enumerate(spec.get("topologyConstraintGroupConfigs") or []):
        names = cfg.get("podGroupNames") if isinstance(cfg, dict) else None
        if not isinstance(cfg, dict) or not isinstance(cfg.get("name"), str):
            raise _grouping_error(
                pod_key, f"{where}.topologyConstraintGroupConfigs[{i}].name", cfg, "is required"
            )
        if not names:
            continue
        for n in names:
            parents[str(n)] = cfg["name"]
        entry: dict[str, Any] = {"name": cfg["name"]}
        tc = _pack_constraint(cfg, topology, pod_key, f"{where}.topologyConstraintGroupConfigs[{i}]")
        if tc:
            entry["topologyConstraint"] = tc
        subgroups.append(entry)
    pod_name = str(_meta(pod).get("name") or "")
    pod_subgroup: str | None = None
    total = 0
    for i, pg in enumerate(spec.get("podgroups") or []):
        pg_where = f"{where}.podgroups[{i}]"
        if not isinstance(pg, dict) or not isinstance(pg.get("name"), str) or not pg.get("name"):
            raise _grouping_error(pod_key, f"{pg_where}.name", pg, "is required")
        minimum = pg.get("minReplicas")
        if isinstance(minimum, bool) or not isinstance(minimum, int) or minimum <= 0:
            raise _grouping_error(pod_key, f"{pg_where}.minReplicas", minimum, "must be an integer > 0")
        total += minimum
        entry = {"name": pg["name"], "minMember": minimum}
        if pg["name"] in parents:
            entry["parent"] = parents[pg["name"]]
        tc = _pack_constraint(pg, topology, pod_key, pg_where)
        if tc:
            entry["topologyConstraint"] = tc
        subgroups.append(entry)
        for ref in pg.get("podReferences") or []:
            if (
                isinstance(ref, dict)
                and ref.get("name") == pod_name
                and ref.get("namespace", namespace) == namespace
            ):
                pod_subgroup = pg["name"]
    return gang, max(total, 1), tuple(subgroups), pod_subgroup, constraint


def _knative_revision(
    service: dict[str, Any], owners: list[dict[str, Any]], pod: dict[str, Any], get: OwnerGetter | None
) -> dict[str, Any]:
    """The Revision a Knative Service's pod runs (its ``serving.knative.dev/revision`` label)."""
    pod_key = object_key(pod)
    rev_name = _labels(pod).get(LABEL_KNATIVE_REVISION)
    if not rev_name:
        where = f"metadata.labels[{LABEL_KNATIVE_REVISION}]"
        raise _grouping_error(pod_key, where, None, "is required on a Knative Service's pod")
    for o in owners:
        if o.get("kind") == "Revision" and _meta(o).get("name") == rev_name and _meta(o).get("uid"):
            return o
    namespace = str(_meta(pod).get("namespace") or "")
    rev = get("serving.knative.dev/v1", "Revision", namespace, rev_name) if get is not None else None
    if rev is None:
        where = f"Knative Service {object_key(service)} revision"
        raise _grouping_error(pod_key, where, rev_name, "no readable Revision yet")
    return {"apiVersion": "serving.knative.dev/v1", "kind": "Revision", **rev}


@dataclass(slots=True)
class _Grouping:
    """What a grouper decides for one pod: the PodGroup's name, owner, gang size and defaults.

    Starts as the generic rule (one PodGroup per top owner, gang of 1, priority ``train``); the grouper of
    the top owner's kind changes what differs for that kind."""

    pod: dict[str, Any]
    pod_key: str
    top: dict[str, Any]
    owners: list[dict[str, Any]]
    get: OwnerGetter | None
    name: str
    owner_ref: dict[str, Any]
    pod_ref: dict[str, Any]
    label_owner: dict[str, Any] | None
    min_member: int = 1
    default_priority: str = "train"
    subgroups: tuple[dict[str, Any], ...] = ()
    pod_subgroup: str | None = None
    constraint: dict[str, str] | None = None  # the workload's own (Grove); else from KAI's annotations
    min_sub_group: int | None = None

    @property
    def pod_name(self) -> str:
        return str(_meta(self.pod).get("name") or "")

    @property
    def pod_uid(self) -> str:
        return str(_meta(self.pod).get("uid") or "")


def _group_deployment(g: _Grouping) -> None:
    g.name, g.owner_ref = f"pg-{g.pod_name}-{g.pod_uid}", g.pod_ref
    g.default_priority = "inference"


def _group_job(g: _Grouping) -> None:
    gang = _min_member_override(g.top, g.pod_key)
    if gang is None:
        g.name = f"pg-{g.pod_name}-{_meta(g.top).get('uid')}"  # one PodGroup per pod
    else:
        g.min_member = gang  # the whole Job is one gang of that size


def _group_cronjob(g: _Grouping) -> None:
    # One PodGroup per run: the Job this pod belongs to, not the CronJob (KAI's CronJob grouper).
    job = g.owners[-2] if len(g.owners) >= 2 else None
    if job is None or job.get("kind") != "Job" or not _meta(job).get("uid"):
        raise _grouping_error(g.pod_key, f"CronJob {object_key(g.top)}", None, "the pod's Job cannot be read")
    g.name = f"pg-{_meta(job).get('name')}-{_meta(job).get('uid')}"
    g.owner_ref, g.label_owner = _owner_ref(job), job


def _group_jobset(g: _Grouping) -> None:
    groups = _jobset(g.top, g.pod, g.pod_key)
    g.name, g.subgroups, g.pod_subgroup = groups.name, groups.subgroups, groups.pod_subgroup
    g.min_member, g.min_sub_group = 0, groups.min_sub_group  # KAI: the root gangs subgroups, not pods


def _group_lws(g: _Grouping) -> None:
    g.name, g.min_member = _lws(g.top, g.pod, g.pod_key)
    g.subgroups, g.pod_subgroup = _lws_subgroups(g.min_member, g.pod)


def _group_grove(g: _Grouping) -> None:
    podgang, g.min_member, g.subgroups, g.pod_subgroup, g.constraint = _grove(g.pod, g.get, g.pod_key)
    g.name = f"pg-{_meta(podgang).get('name')}-{_meta(podgang).get('uid')}"
    g.owner_ref, g.label_owner = _owner_ref(podgang), podgang
    pcn = _sub(podgang, "spec").get("priorityClassName")
    if isinstance(pcn, str) and pcn:
        g.default_priority = pcn


def _group_knative(g: _Grouping) -> None:
    # Knative: one gang per Revision of at least its min-scale pods; inference by default (KAI).
    rev = _knative_revision(g.top, g.owners, g.pod, g.get)
    g.name = f"pg-{_meta(rev).get('name')}-{_meta(rev).get('uid')}"
    raw = _annotations(rev).get(ANNOTATION_KNATIVE_MIN_SCALE, "1").strip()
    g.min_member = int(raw) if raw.isdigit() and int(raw) > 0 else 1  # KAI: unparsable = 1
    g.owner_ref, g.label_owner, g.default_priority = _owner_ref(rev), rev, "inference"


def _group_notebook(g: _Grouping) -> None:
    g.default_priority = "build"


def _group_kubeflow(g: _Grouping) -> None:
    g.min_member = _replicas_sum(g.top, _KUBEFLOW_REPLICA_SPECS[str(g.top.get("kind"))], g.pod_key)


def _group_pytorch(g: _Grouping) -> None:
    g.min_member = _pytorch_min_member(g.top, g.pod_key)
    g.subgroups, g.pod_subgroup = _pytorch_subgroups(g.top, g.pod, g.min_member, g.pod_key)


def _group_mpi(g: _Grouping) -> None:
    g.min_member = _replicas_sum(g.top, "mpiReplicaSpecs", g.pod_key)
    spec = _sub(g.top, "spec")
    if spec.get("launcherCreationPolicy") == "WaitForWorkersReady" and not _mpi_launcher_exists(
        g.top, g.pod, g.get
    ):
        # The operator creates the launcher only once the workers run: counting it would make the gang
        # wait for a pod that waits for the gang (KAI's MPI grouper leaves it out the same way).
        launcher = _int_at(g.top, ("spec", "mpiReplicaSpecs", "Launcher", "replicas"), g.pod_key, 0) or 0
        g.min_member = max(g.min_member - launcher, 1)


def _group_raycluster(g: _Grouping) -> None:
    g.min_member, g.subgroups = _ray(g.top, g.pod_key)
    g.pod_subgroup = _ray_pod_subgroup(g.pod, g.subgroups)


def _group_ray_owner(g: _Grouping) -> None:
    # RayJob / RayService: the gang size lives on the RayCluster they created (status.rayClusterName).
    if g.get is None:
        return
    kind, namespace = str(g.top.get("kind")), str(_meta(g.pod).get("namespace") or "")
    status = _sub(g.top, "status")
    cluster_name = status.get("rayClusterName") or (status.get("activeServiceStatus") or {}).get(
        "rayClusterName"
    )
    cluster = (
        g.get(str(g.top.get("apiVersion")), "RayCluster", namespace, str(cluster_name))
        if cluster_name
        else None
    )
    if cluster is None:
        raise _grouping_error(
            g.pod_key,
            f"{kind} {object_key(g.top)} status.rayClusterName",
            cluster_name,
            "no readable RayCluster yet",
        )
    g.min_member, g.subgroups = _ray({"kind": "RayCluster", **cluster}, g.pod_key)
    g.pod_subgroup = _ray_pod_subgroup(g.pod, g.subgroups)


Grouper = Callable[[_Grouping], None]

_GROUPERS: Final[dict[tuple[str | None, str], Grouper]] = {
    ("apps", "Deployment"): _group_deployment,
    ("batch", "Job"): _group_job,
    ("batch", "CronJob"): _group_cronjob,
    (None, "JobSet"): _group_jobset,
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): _group_lws,
    **{key: _group_grove for key in _GROVE_KINDS},
    ("serving.knative.dev", "Service"): _group_knative,
    ("kubeflow.org", "Notebook"): _group_notebook,
    **{("kubeflow.org", kind): _group_kubeflow for kind in _KUBEFLOW_REPLICA_SPECS},
    ("kubeflow.org", "PyTorchJob"): _group_pytorch,
    ("kubeflow.org", "MPIJob"): _group_mpi,
    (None, "RayCluster"): _group_raycluster,
    (None, "RayJob"): _group_ray_owner,
    (None, "RayService"): _group_ray_owner,
}
"""The grouper of each top owner kind, as KAI's pod-grouper hub has one per kind: (API group, kind), or
(None, kind) for any group. A kind not listed is grouped by the generic rule."""


def _grouper(top: dict[str, Any]) -> Grouper | None:
    kind = str(top.get("kind"))
    return _GROUPERS.get((_api_group(top), kind)) or _GROUPERS.get((None, kind))


def plan_pod_group(
    pod: dict[str, Any], owners: list[dict[str, Any]], get: OwnerGetter | None = None
) -> PodGroupPlan:
    """Decide the PodGroup of ``pod`` from its owner chain (see the module doc for the rules).

    The top owner's kind picks its grouper (:data:`_GROUPERS`). ``get`` is used only for RayJob /
    RayService, whose gang size lives on the RayCluster they created (``status.rayClusterName``). Raises
    :class:`InvalidObject` (reason ``HourglassPodGrouping`` or an invalid queue label) when the owner's
    spec cannot give a group.
    """
    meta = _meta(pod)
    pod_key = object_key(pod)
    namespace = str(meta.get("namespace") or "")
    pod_name, pod_uid = str(meta.get("name") or ""), str(meta.get("uid") or "")
    top = owners[-1] if owners else None
    inherited: dict[str, str] = {}
    if top is not None and (_api_group(top), str(top.get("kind"))) in _SKIP_TOP_OWNER:
        # Argo Workflow, Kubeflow TrainJob, Dynamo graph deployment: group by the next owner down (the pod
        # for an Argo step, the JobSet for a TrainJob, Grove's PodCliqueSet for Dynamo), with the skipped
        # owner's labels on top of that owner's (KAI).
        inherited = _labels(top)
        owners = owners[:-1]
        top = owners[-1] if owners else None
    kind = str(top.get("kind")) if top else "Pod"
    pod_ref = _owner_ref({"apiVersion": "v1", "kind": "Pod", **pod})
    g = _Grouping(
        pod=pod,
        pod_key=pod_key,
        top=top or {},
        owners=owners,
        get=get,
        name=f"pg-{_meta(top).get('name')}-{_meta(top).get('uid')}" if top else f"pg-{pod_name}-{pod_uid}",
        owner_ref=_owner_ref(top) if top else pod_ref,
        pod_ref=pod_ref,
        label_owner=top,  # the object whose labels come before the pod's (queue, priority, preemptibility)
    )
    pod_labels = _labels(pod)
    if (
        (top is None or kind == "Pod")
        and LABEL_SPARK_APP_NAME in pod_labels
        and LABEL_SPARK_APP_SELECTOR in pod_labels
    ):
        # Spark submitted without the operator: driver and executors share the app's selector label.
        g.name = pod_labels[LABEL_SPARK_APP_SELECTOR]
    elif top is not None and (grouper := _grouper(top)) is not None:
        grouper(g)
    return _plan(g, namespace, kind, inherited, pod_labels)


def _plan(
    g: _Grouping, namespace: str, kind: str, inherited: dict[str, str], pod_labels: dict[str, str]
) -> PodGroupPlan:
    """The plan from a grouper's decision: queue, priority and preemptibility from the owner's labels first."""
    pod_key, label_owner = g.pod_key, g.label_owner
    owner_labels = {**(_labels(label_owner) if label_owner else {}), **inherited}
    queue = (
        owner_labels.get(LABEL_QUEUE)
        or pod_labels.get(LABEL_QUEUE)
        or owner_labels.get(LABEL_PROJECT)
        or pod_labels.get(LABEL_PROJECT)
        or DEFAULT_QUEUE
    )
    if problem := check_queue_name(queue):
        source = LABEL_QUEUE if LABEL_QUEUE in owner_labels or LABEL_QUEUE in pod_labels else LABEL_PROJECT
        raise InvalidObject("Pod", pod_key, f"metadata.labels[{source}]", queue, problem)
    spec = _sub(g.pod, "spec")
    priority = (
        owner_labels.get(LABEL_PRIORITY_CLASS)
        or pod_labels.get(LABEL_PRIORITY_CLASS)
        or str(spec.get("priorityClassName") or "")
        or g.default_priority
    )
    pre = owner_labels.get(LABEL_PREEMPTIBILITY) or pod_labels.get(LABEL_PREEMPTIBILITY) or None
    if pre is not None and pre not in ("preemptible", "non-preemptible"):
        raise InvalidObject(
            "Pod",
            pod_key,
            f"metadata.labels[{LABEL_PREEMPTIBILITY}]",
            pre,
            "must be preemptible or non-preemptible",
        )
    return PodGroupPlan(
        name=g.name,
        namespace=namespace,
        # 0 only beside minSubGroup, as KAI writes it; the engine reads minMember as at least 1.
        min_member=g.min_member if g.min_sub_group is not None else max(g.min_member, 1),
        queue=queue,
        priority_class=priority,
        preemptibility=pre,
        owner=g.owner_ref,
        top_owner_kind=kind,
        topology_constraint=g.constraint
        if g.constraint is not None
        else _topology_constraint(label_owner if label_owner is not None else g.pod),
        subgroups=g.subgroups,
        pod_subgroup=g.pod_subgroup,
        min_sub_group=g.min_sub_group,
        # KAI copies the top owner's labels onto the PodGroup; the pod's own, as for the queue, when it has none.
        node_pool=owner_labels.get(LABEL_NODE_POOL) or pod_labels.get(LABEL_NODE_POOL) or None,
    )


def _spec(plan: PodGroupPlan) -> dict[str, Any]:
    spec: dict[str, Any] = {"queue": plan.queue, "priorityClassName": plan.priority_class}
    if plan.min_sub_group is None:
        # KAI's CRD holds minMember and minSubGroup mutually exclusive: a root gang of subgroups has none.
        spec = {"minMember": plan.min_member, **spec}
    if plan.preemptibility:
        spec["preemptibility"] = plan.preemptibility
    if plan.topology_constraint:
        spec["topologyConstraint"] = dict(plan.topology_constraint)
    if plan.min_sub_group is not None:
        spec["minSubGroup"] = plan.min_sub_group
    if plan.subgroups:
        spec["subGroups"] = [dict(sg) for sg in plan.subgroups]
    return spec


def podgroup_manifest(plan: PodGroupPlan) -> dict[str, Any]:
    """The PodGroup object to create for ``plan`` (owned by the top owner, so it is garbage-collected)."""
    meta: dict[str, Any] = {
        "name": plan.name,
        "namespace": plan.namespace,
        "labels": {"app.kubernetes.io/managed-by": MANAGED_BY, LABEL_QUEUE: plan.queue},
    }
    if plan.node_pool:
        meta["labels"][LABEL_NODE_POOL] = plan.node_pool
    if plan.owner.get("uid"):
        meta["ownerReferences"] = [{**plan.owner, "blockOwnerDeletion": False, "controller": False}]
    return {"apiVersion": PODGROUP_API_VERSION, "kind": "PodGroup", "metadata": meta, "spec": _spec(plan)}


def podgroup_patch(existing: dict[str, Any], plan: PodGroupPlan) -> dict[str, Any] | None:
    """A merge patch bringing an existing PodGroup's managed fields to ``plan``, or None if they match."""
    current = _sub(existing, "spec")
    wanted = _spec(plan)
    diff: dict[str, Any] = {k: v for k, v in wanted.items() if current.get(k) != v}
    for gone in ("minMember", "minSubGroup"):
        if gone in current and gone not in wanted:
            diff[gone] = None  # a merge patch's null removes it (the two may not be set together)
    return {"spec": diff} if diff else None
