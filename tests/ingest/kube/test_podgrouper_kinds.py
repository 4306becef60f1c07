"""Pod grouping parity with KAI's pod-grouper for the kinds issue 14 names (ingest/kube/podgrouper.py).

One table per kind: the owner chain a pod has in a real cluster (immediate owner first) -> the PodGroup
KAI's plugin makes (name, minMember, priority class, queue, owner). Bad annotations are errors naming the
object and the annotation, never a crash.
"""

from __future__ import annotations

from typing import Any

import pytest

from ingest.kube.podgrouper import plan_pod_group, podgroup_manifest, resolve_owners, skip_podgrouper
from ingest.kube.translate import InvalidObject
from tests.support.owner_chains import owner, pod

Expect = tuple[str, int, str]  # (PodGroup name, minMember, priorityClassName)


def _check(p: dict[str, Any], owners: list[dict[str, Any]], expect: Expect, get: Any = None) -> Any:
    plan = plan_pod_group(p, owners, get)
    assert (plan.name, plan.min_member, plan.priority_class) == expect
    return plan


# --------------------------------------------------------------------------------- LeaderWorkerSet


def _lws(size: int | None = 4, policy: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": 3, "leaderWorkerTemplate": {}}
    if size is not None:
        spec["leaderWorkerTemplate"]["size"] = size
    if policy is not None:
        spec["startupPolicy"] = policy
    return owner("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", "lws", spec)


@pytest.mark.parametrize(
    ("lws", "labels", "node", "expect"),
    [
        # Every pod of group replica 1 (leader and workers) joins one gang of `size`, not of `replicas`.
        (
            _lws(),
            {"leaderworkerset.sigs.k8s.io/group-index": "1", "leaderworkerset.sigs.k8s.io/worker-index": "0"},
            None,
            ("pg-lws-lws-uid-group-1", 4, "train"),
        ),
        (
            _lws(),
            {"leaderworkerset.sigs.k8s.io/group-index": "2", "leaderworkerset.sigs.k8s.io/worker-index": "3"},
            None,
            ("pg-lws-lws-uid-group-2", 4, "train"),
        ),
        # LeaderReady: an unbound leader starts alone; its workers (and a bound leader) need the whole group.
        (
            _lws(policy="LeaderReady"),
            {"leaderworkerset.sigs.k8s.io/group-index": "0", "leaderworkerset.sigs.k8s.io/worker-index": "0"},
            None,
            ("pg-lws-lws-uid-group-0", 1, "train"),
        ),
        (
            _lws(policy="LeaderReady"),
            {"leaderworkerset.sigs.k8s.io/group-index": "0", "leaderworkerset.sigs.k8s.io/worker-index": "0"},
            "n1",
            ("pg-lws-lws-uid-group-0", 4, "train"),
        ),
        (
            _lws(policy="LeaderReady"),
            {"leaderworkerset.sigs.k8s.io/group-index": "0", "leaderworkerset.sigs.k8s.io/worker-index": "2"},
            None,
            ("pg-lws-lws-uid-group-0", 4, "train"),
        ),
    ],
    ids=[
        "leader-group-1",
        "worker-group-2",
        "leader-ready-leader-first",
        "leader-ready-leader-bound",
        "leader-ready-worker",
    ],
)
def test_leaderworkerset_is_a_gang_of_size_per_group(
    lws: dict[str, Any], labels: dict[str, str], node: str | None, expect: Expect
) -> None:
    sts = owner("StatefulSet", "apps/v1", "lws-1")
    p = pod(labels=labels, **({"nodeName": node} if node else {}))
    plan = _check(p, [sts, lws], expect)
    assert plan.owner["kind"] == "LeaderWorkerSet"


@pytest.mark.parametrize(
    ("lws", "message"),
    [(_lws(size=None), "leaderWorkerTemplate.size"), (_lws(policy="Whenever"), "startupPolicy")],
    ids=["no-size", "unknown-policy"],
)
def test_leaderworkerset_bad_spec_is_a_grouping_error(lws: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidObject) as e:
        plan_pod_group(pod(), [lws])
    assert e.value.reason == "HourglassPodGrouping" and message in e.value.message


def _segmented_lws(policy: bool) -> dict[str, Any]:
    lws = _lws()
    template = lws["spec"]["leaderWorkerTemplate"]
    if policy:  # KAI's docs/topology/segments.md: LWS's own field
        template["subGroupPolicy"] = {"subGroupSize": 2}
    else:
        template["workerTemplate"] = {"metadata": {"annotations": {"kai.scheduler/segment-size": "2"}}}
    return lws


@pytest.mark.parametrize(
    ("policy", "field"),
    [(True, "subGroupPolicy.subGroupSize"), (False, "annotations[kai.scheduler/segment-size]")],
    ids=["subgroup-policy", "segment-annotation"],
)
def test_leaderworkerset_segments_are_refused_naming_the_field(policy: bool, field: str) -> None:
    with pytest.raises(InvalidObject) as e:
        plan_pod_group(pod(), [_segmented_lws(policy)])
    assert e.value.reason == "HourglassPodGrouping" and field in e.value.message
    assert "not supported" in e.value.message


# ----------------------------------------------------------------------------------------- CronJob


def test_cronjob_gets_one_podgroup_per_job_run() -> None:
    cron = owner("CronJob", "batch/v1", "nightly", labels={"kai.scheduler/queue": "team-a"})
    run1 = owner("Job", "batch/v1", "nightly-1000")
    run2 = owner("Job", "batch/v1", "nightly-2000")
    a = _check(pod("a"), [run1, cron], ("pg-nightly-1000-nightly-1000-uid", 1, "train"))
    b = _check(pod("b"), [run1, cron], ("pg-nightly-1000-nightly-1000-uid", 1, "train"))
    c = _check(pod("c"), [run2, cron], ("pg-nightly-2000-nightly-2000-uid", 1, "train"))
    assert a.name == b.name != c.name  # pods of one run share it; the next run gets its own
    assert a.owner == {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "nightly-1000",
        "uid": "nightly-1000-uid",
    }
    assert (a.queue, c.queue) == ("default-queue", "default-queue")  # the Job's labels, as KAI reads them
    with pytest.raises(InvalidObject, match="the pod's Job cannot be read"):
        plan_pod_group(pod(), [cron])


# -------------------------------------------------------------------------- batch-min-member on Job / JobSet


@pytest.mark.parametrize(
    ("annotations", "expect"),
    [
        ({}, ("pg-p-j-uid", 1, "train")),  # no override: one PodGroup per pod, as before
        ({"kai.scheduler/batch-min-member": "2"}, ("pg-j-j-uid", 2, "train")),  # the whole Job, a gang of 2
        ({"kai.scheduler/batch-min-member": " 6 "}, ("pg-j-j-uid", 6, "train")),
    ],
    ids=["none", "two", "six-spaces"],
)
def test_batch_min_member_on_a_job(annotations: dict[str, str], expect: Expect) -> None:
    job = owner("Job", "batch/v1", "j", {"parallelism": 6}, annotations=annotations)
    _check(pod(), [job], expect)


def test_batch_min_member_on_a_jobset_sets_how_many_replicated_jobs_the_gang_needs() -> None:
    rjs = [{"name": n, "replicas": 2, "template": {"spec": {"parallelism": 4}}} for n in ("a", "b", "w")]
    js = owner("JobSet", "jobset.x-k8s.io/v1alpha2", "js", {"replicatedJobs": rjs})
    member = pod(labels={"jobset.sigs.k8s.io/replicatedjob-name": "w", "jobset.sigs.k8s.io/job-index": "0"})
    plan = _check(member, [owner("Job", "batch/v1", "js-w-0"), js], ("pg-js-js-uid", 0, "train"))
    assert plan.min_sub_group == 3
    js["metadata"]["annotations"] = {"kai.scheduler/batch-min-member": "2"}
    plan = _check(member, [owner("Job", "batch/v1", "js-w-0"), js], ("pg-js-js-uid", 0, "train"))
    assert plan.min_sub_group == 2


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", ""])
def test_bad_batch_min_member_is_an_error_naming_it(value: str) -> None:
    job = owner("Job", "batch/v1", "j", annotations={"kai.scheduler/batch-min-member": value})
    with pytest.raises(InvalidObject) as e:
        plan_pod_group(pod(), [job])
    assert (
        "kai.scheduler/batch-min-member" in e.value.message and "must be an integer >= 1" in e.value.message
    )


# ---------------------------------------------------------------------------------- skip-podgrouper


@pytest.mark.parametrize(
    ("on", "expect"),
    [("pod", "Pod ns/p"), ("job", "Job ns/j"), ("jobset", "JobSet ns/js"), (None, None)],
    ids=["on-pod", "on-owner", "on-top-owner", "absent"],
)
def test_skip_podgrouper_on_the_pod_or_any_owner(on: str | None, expect: str | None) -> None:
    skip = {"kai.scheduler/skip-podgrouper": "true"}
    p = pod(annotations=skip if on == "pod" else {})
    job = owner("Job", "batch/v1", "j", annotations=skip if on == "job" else {})
    js = owner("JobSet", "jobset.x-k8s.io/v1alpha2", "js", annotations=skip if on == "jobset" else {})
    assert skip_podgrouper(p, [job, js]) == expect
    assert skip_podgrouper(pod(annotations={"kai.scheduler/skip-podgrouper": "false"}), []) is None


# ------------------------------------------------------------------------- default priorities per kind


def _knative_chain(min_scale: str | None = None) -> list[dict[str, Any]]:
    ann = {"autoscaling.knative.dev/min-scale": min_scale} if min_scale is not None else {}
    rs = owner("ReplicaSet", "apps/v1", "hello-00001-deployment-abc")
    dep = owner("Deployment", "apps/v1", "hello-00001-deployment")
    rev = owner(
        "Revision",
        "serving.knative.dev/v1",
        "hello-00001",
        annotations=ann,
        labels={"kai.scheduler/queue": "serve"},
    )
    cfg = owner("Configuration", "serving.knative.dev/v1", "hello")
    svc = owner("Service", "serving.knative.dev/v1", "hello")
    return [rs, dep, rev, cfg, svc]


KNATIVE_POD = {"serving.knative.dev/revision": "hello-00001"}
SPARK = {"spark-app-name": "pi", "spark-app-selector": "spark-0123abcd"}


@pytest.mark.parametrize(
    ("p", "owners", "expect", "owner_kind"),
    [
        # Knative Service: a gang per Revision of min-scale pods, inference by default.
        (
            pod(labels=KNATIVE_POD),
            _knative_chain(),
            ("pg-hello-00001-hello-00001-uid", 1, "inference"),
            "Revision",
        ),
        (
            pod(labels=KNATIVE_POD),
            _knative_chain("3"),
            ("pg-hello-00001-hello-00001-uid", 3, "inference"),
            "Revision",
        ),
        (
            pod(labels=KNATIVE_POD),
            _knative_chain("many"),
            ("pg-hello-00001-hello-00001-uid", 1, "inference"),
            "Revision",
        ),
        # Kubeflow Notebook: build (not preemptible).
        (
            pod(),
            [owner("StatefulSet", "apps/v1", "nb"), owner("Notebook", "kubeflow.org/v1", "nb")],
            ("pg-nb-nb-uid", 1, "build"),
            "Notebook",
        ),
        # Argo Workflow: KAI skips the Workflow; each step pod is its own group, train.
        (
            pod("step-1"),
            [owner("Workflow", "argoproj.io/v1alpha1", "wf")],
            ("pg-step-1-step-1-uid", 1, "train"),
            "Pod",
        ),
        # Kubeflow TrainJob: skipped; grouped as the JobSet it created (its replicatedJob's subgroups).
        (
            pod(
                labels={"jobset.sigs.k8s.io/replicatedjob-name": "node", "jobset.sigs.k8s.io/job-index": "1"}
            ),
            [
                owner("Job", "batch/v1", "tj-node-0"),
                owner(
                    "JobSet",
                    "jobset.x-k8s.io/v1alpha2",
                    "tj",
                    {
                        "replicatedJobs": [
                            {"name": "node", "replicas": 2, "template": {"spec": {"parallelism": 2}}}
                        ]
                    },
                ),
                owner("TrainJob", "trainer.kubeflow.org/v1alpha1", "tj"),
            ],
            ("pg-tj-tj-uid", 0, "train"),
            "JobSet",
        ),
        # Dynamo graph deployment: skipped, any version (KAI v0.17 hub.go; skiptopowner_test.go's DGD case,
        # whose next owner down is the pod itself).
        (
            pod("worker"),
            [owner("DynamoGraphDeployment", "nvidia.com/v1beta1", "dgd")],
            ("pg-worker-worker-uid", 1, "train"),
            "Pod",
        ),
        # Spark (spark-submit): driver and executors share the app's selector label as the group, train.
        (pod("driver", labels=SPARK), [], ("spark-0123abcd", 1, "train"), "Pod"),
        (pod("exec-1", labels=SPARK), [owner("Pod", "v1", "driver")], ("spark-0123abcd", 1, "train"), "Pod"),
    ],
    ids=[
        "knative",
        "knative-min-scale",
        "knative-bad-min-scale",
        "notebook",
        "argo",
        "trainjob",
        "dynamo",
        "spark-driver",
        "spark-executor",
    ],
)
def test_kinds_get_kais_group_and_default_priority(
    p: dict[str, Any], owners: list[dict[str, Any]], expect: Expect, owner_kind: str
) -> None:
    plan = _check(p, owners, expect)
    assert plan.owner["kind"] == owner_kind
    assert podgroup_manifest(plan)["spec"]["priorityClassName"] == expect[2]


def test_knative_queue_comes_from_the_revision_and_a_missing_revision_is_read_or_an_error() -> None:
    chain = _knative_chain()
    assert plan_pod_group(pod(labels=KNATIVE_POD), chain).queue == "serve"
    svc = chain[-1]
    rev = owner(
        "Revision",
        "serving.knative.dev/v1",
        "hello-00001",
        annotations={"autoscaling.knative.dev/min-scale": "2"},
    )
    got = plan_pod_group(pod(labels=KNATIVE_POD), [svc], lambda *a: rev if a[1] == "Revision" else None)
    assert (got.name, got.min_member) == ("pg-hello-00001-hello-00001-uid", 2)
    with pytest.raises(InvalidObject, match="no readable Revision yet"):
        plan_pod_group(pod(labels=KNATIVE_POD), [svc], lambda *a: None)
    with pytest.raises(InvalidObject, match=r"serving\.knative\.dev/revision"):
        plan_pod_group(pod(), [svc])


def test_skipped_owners_labels_are_inherited_and_an_override_beats_the_kind_default() -> None:
    wf = owner(
        "Workflow",
        "argoproj.io/v1alpha1",
        "wf",
        labels={"kai.scheduler/queue": "etl", "priorityClassName": "build"},
    )
    plan = plan_pod_group(pod("step-1"), [wf])
    assert (plan.queue, plan.priority_class) == ("etl", "build")
    nb = owner("Notebook", "kubeflow.org/v1", "nb", labels={"priorityClassName": "build-preemptible"})
    assert plan_pod_group(pod(), [nb]).priority_class == "build-preemptible"


def test_dynamo_graph_deployment_is_skipped_for_its_podcliqueset_with_its_labels() -> None:
    """KAI's Dynamo ownership: DynamoGraphDeployment -> PodCliqueSet -> PodClique -> Pod. The DGD is
    skipped; the PodCliqueSet (Grove) groups, and the DGD's queue label reaches the PodGroup."""
    dgd = owner(
        "DynamoGraphDeployment", "nvidia.com/v1alpha1", "llm", labels={"kai.scheduler/queue": "serve"}
    )
    chain = [
        owner("PodClique", "grove.io/v1alpha1", "llm-0-decode"),
        owner("PodCliqueSet", "grove.io/v1alpha1", "llm"),
    ]
    gang = {
        "metadata": {"name": "llm-0", "namespace": "ns", "uid": "gang-uid"},
        "spec": {"podgroups": [{"name": "llm-0-decode", "minReplicas": 2}]},
    }
    p = pod("llm-0-decode-0", labels={"grove.io/podgang": "llm-0"})
    plan = plan_pod_group(p, [*chain, dgd], lambda *a: gang if a[1] == "PodGang" else None)
    assert (plan.name, plan.min_member, plan.queue) == ("pg-llm-0-gang-uid", 2, "serve")
    assert (plan.owner["kind"], plan.top_owner_kind) == ("PodGang", "PodCliqueSet")


def test_resolve_owners_gives_cronjob_and_lws_chains_the_grouper_needs() -> None:
    """The owner walk as the watcher does it: the CronJob's Job run and the LWS are both in the chain."""
    cron = owner("CronJob", "batch/v1", "nightly")
    job = owner("Job", "batch/v1", "nightly-1000")
    job["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "name": "nightly",
            "uid": "nightly-uid",
            "controller": True,
        }
    ]
    objects = {("Job", "nightly-1000"): job, ("CronJob", "nightly"): cron}
    p = pod()
    p["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "nightly-1000",
            "uid": "nightly-1000-uid",
            "controller": True,
        }
    ]
    chain = resolve_owners(p, lambda av, kind, ns, name: objects.get((kind, name)))
    assert [o["kind"] for o in chain] == ["Job", "CronJob"]
    assert plan_pod_group(p, chain).name == "pg-nightly-1000-nightly-1000-uid"


# --------------------------------------------------------------------------------- node pools


@pytest.mark.parametrize(
    ("job_labels", "pod_labels", "pool"),
    [
        ({"kai.scheduler/node-pool": "gpu-nodes"}, {}, "gpu-nodes"),  # KAI: the top owner's labels
        ({"kai.scheduler/node-pool": "a"}, {"kai.scheduler/node-pool": "b"}, "a"),
        ({}, {"kai.scheduler/node-pool": "b"}, "b"),  # KAI's docs/scheduling-shards: a labelled pod
        ({}, {}, None),
    ],
)
def test_the_podgroup_carries_the_node_pool_label_that_puts_it_in_a_shard(
    job_labels: dict[str, str], pod_labels: dict[str, str], pool: str | None
) -> None:
    job = owner("Job", "batch/v1", "train", labels=job_labels)
    plan = plan_pod_group(pod("train-0", labels=pod_labels), [job])
    assert plan.node_pool == pool
    labels = podgroup_manifest(plan)["metadata"]["labels"]
    assert labels.get("kai.scheduler/node-pool") == pool
