"""A bind means what kube-scheduler would allow: the engine's filter verdicts on cases where it once
disagreed with kube-scheduler v1.36 (k8s.io/kubernetes pkg/scheduler/framework/plugins), and the reclaim
signature that must not let a harder job stand for an easier one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scheduler.conformance.runner import filter_verdicts, run_doc

GB = 1_000_000_000


def _node(name: str, **labels: str) -> dict[str, Any]:
    return {"name": name, "labels": labels}


def _filter_doc(
    nodes: list[dict[str, Any]], pod: dict[str, Any], existing: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    jobs = [
        {
            "name": f"e{i}",
            "queue": "q",
            "tasks": [{"name": f"e{i}", "status": "running", "cpu_millicores": 0, "memory_bytes": 0} | e],
        }
        for i, e in enumerate(existing)
    ]
    jobs.append(
        {"name": "p", "queue": "q", "tasks": [{"name": "p", "cpu_millicores": 0, "memory_bytes": 0} | pod]}
    )
    return {
        "run": {"mode": "filter", "task": "p"},
        "cluster": {"nodes": nodes},
        "queues": [{"name": "q"}],
        "jobs": jobs,
    }


def _exists(key: str, topology_key: str) -> dict[str, Any]:
    return {
        "label_selector": {"match_expressions": [{"key": key, "operator": "Exists"}]},
        "topology_key": topology_key,
    }


def test_affinity_terms_must_be_matched_by_one_pod() -> None:
    # interpodaffinity/filtering_test.go TestRequiredAffinityMultipleNodes: "Test incoming pod's affinity:
    # firstly check if all affinityTerms match, and then check if all topologyKeys match, and the match
    # logic should be satisfied on the same pod".
    nodes = [_node("nodeA", region="r1", zone="z1"), _node("nodeB", region="r1", zone="z2")]
    pod = {"pod_affinity": [_exists("foo", "region"), _exists("bar", "zone")]}
    existing = [{"node": "nodeA", "labels": {"foo": ""}}, {"node": "nodeB", "labels": {"bar": ""}}]
    got = filter_verdicts(_filter_doc(nodes, pod, existing))
    assert got == {"nodeA": "InterPodAffinity", "nodeB": "InterPodAffinity"}


def test_first_pod_of_a_collection_when_no_pod_matches_all_terms() -> None:
    # Same table: "The affinity rule is to schedule all of the pods of this collection to the same zone.
    # The first pod of the collection should not be blocked from being scheduled onto any node, even
    # there's no existing pod that matches the rule anywhere."
    nodes = [_node("nodeA", zone="az1", hostname="h1"), _node("nodeB", zone="az2", hostname="h2")]
    pod = {
        "labels": {"foo": "bar", "service": "securityscan"},
        "pod_affinity": [
            {"label_selector": {"match_labels": {"foo": "bar"}}, "topology_key": "zone"},
            {"label_selector": {"match_labels": {"service": "securityscan"}}, "topology_key": "zone"},
        ],
    }
    got = filter_verdicts(_filter_doc(nodes, pod, [{"node": "nodeA", "labels": {"foo": "bar"}}]))
    assert got == {"nodeA": None, "nodeB": None}


def test_spread_counts_only_pods_on_eligible_nodes() -> None:
    # podtopologyspread (calPreFilterState): with nodeAffinityPolicy Honor, the pods on a node the pod's
    # node selector excludes do not count towards their zone.
    nodes = [
        _node("a1", zone="z1", pool="gpu"),
        _node("a2", zone="z1", pool="cpu"),
        _node("b1", zone="z2", pool="gpu"),
    ]
    spread = {"max_skew": 1, "topology_key": "zone", "label_selector": {"match_labels": {"app": "x"}}}
    pod = {"labels": {"app": "x"}, "node_selector": {"pool": "gpu"}, "topology_spread": [spread]}
    existing = [{"node": "a2", "labels": {"app": "x"}}, {"node": "a2", "labels": {"app": "x"}}]
    got = filter_verdicts(_filter_doc(nodes, pod, existing))
    assert got == {"a1": None, "a2": "NodeAffinity", "b1": None}


def test_spread_score_counts_only_eligible_nodes() -> None:
    # The ScheduleAnyway score reads the same counts: z1's pods sit on a node the pod cannot use, so z1 is
    # the emptier zone for it and a1 (bin-packed by name otherwise) wins over b1 only by the spread score.
    nodes = [
        _node("a1", zone="z1", pool="gpu"),
        _node("a2", zone="z1", pool="cpu"),
        _node("b1", zone="z2", pool="gpu"),
    ]
    spread = {
        "max_skew": 1,
        "topology_key": "zone",
        "when_unsatisfiable": "ScheduleAnyway",
        "label_selector": {"match_labels": {"app": "x"}},
    }
    pod = {"labels": {"app": "x"}, "node_selector": {"pool": "gpu"}, "topology_spread": [spread]}
    existing = [
        {"node": "a2", "labels": {"app": "x"}},
        {"node": "a2", "labels": {"app": "x"}},
        {"node": "b1", "labels": {"app": "x"}},
    ]
    doc = _filter_doc(nodes, pod, existing) | {
        "run": {"mode": "single_pass", "phase": "allocate"},
        "expect": {"tasks": {"p": {"status": "allocated", "node": "a1"}}},
    }
    diffs, _ = run_doc(doc)
    assert diffs == []


def test_cordoned_node_admits_a_pod_tolerating_unschedulable() -> None:
    # nodeunschedulable/node_unschedulable_test.go: "Schedule pod with toleration to unschedulable node".
    nodes = [{"name": "n", "unschedulable": True}]
    tol = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
    assert filter_verdicts(_filter_doc(nodes, {"tolerations": [tol]})) == {"n": None}
    assert filter_verdicts(_filter_doc(nodes, {})) == {"n": "NodeUnschedulable"}


def test_invalid_node_affinity_value_matches_no_node() -> None:
    # nodeaffinity/node_affinity_test.go: "Pod with an invalid value in Affinity term won't be scheduled
    # onto the node" (NotIn an invalid label value would otherwise match every node).
    term = {"match_expressions": [{"key": "foo", "operator": "NotIn", "values": ["invalid value: ___@#$%^"]}]}
    got = filter_verdicts(_filter_doc([_node("n", foo="bar")], {"node_affinity": [term]}))
    assert got == {"n": "NodeAffinity"}


def test_empty_key_exists_toleration_tolerates_only_its_effect() -> None:
    # k8s.io/api core/v1 Toleration.ToleratesTaint: the effect is checked before the key.
    nodes = [
        {"name": "ns", "taints": [{"key": "a", "value": "b", "effect": "NoSchedule"}]},
        {"name": "ne", "taints": [{"key": "a", "value": "b", "effect": "NoExecute"}]},
    ]
    tol = {"key": "", "operator": "Exists", "effect": "NoExecute"}
    assert filter_verdicts(_filter_doc(nodes, {"tolerations": [tol]})) == {
        "ns": "TaintToleration",
        "ne": None,
    }


def test_a_job_needing_a_held_port_does_not_stand_for_one_without() -> None:
    # Reclaim: j1 needs a host port a foreign pod holds on the only node, so it cannot be helped; j2 is
    # the same job without the port and must still get its reclaim (KAI hashes host ports into the
    # scheduling signature).
    doc = {
        "run": {"mode": "single_pass", "phase": "reclaim"},
        "cluster": {
            "nodes": [{"name": "n1", "gpus": 8, "cpu_millicores": 64000, "memory_bytes": 256 * GB}],
            "foreign_pods": [{"name": "f", "node": "n1", "host_ports": [{"port": 8080}]}],
        },
        "queues": [{"name": "a", "gpu": {"quota": 0}}, {"name": "b", "gpu": {"quota": 8}}],
        "jobs": [
            {
                "name": "run",
                "queue": "a",
                "min_available": 1,
                "tasks": [
                    {"name": f"run-{i}", "gpus": 1, "status": "running", "node": "n1"} for i in range(8)
                ],
            },
            {
                "name": "j1",
                "queue": "b",
                "age_minutes": 2,
                "tasks": [{"name": "j1-0", "gpus": 1, "host_ports": [{"port": 8080}]}],
            },
            {"name": "j2", "queue": "b", "age_minutes": 1, "tasks": [{"name": "j2-0", "gpus": 1}]},
        ],
        "expect": {"tasks": {"j1-0": {"status": "pending"}, "j2-0": {"status": "pipelined", "node": "n1"}}},
    }
    diffs, _ = run_doc(doc)
    assert diffs == []


def test_a_job_needing_an_extended_resource_does_not_stand_for_one_without() -> None:
    # The full resource vector: j1 asks for RDMA no node has; j2, otherwise identical, must be tried.
    doc = {
        "run": {"mode": "single_pass", "phase": "reclaim"},
        "cluster": {"nodes": [{"name": "n1", "gpus": 8, "cpu_millicores": 64000, "memory_bytes": 256 * GB}]},
        "queues": [{"name": "a", "gpu": {"quota": 0}}, {"name": "b", "gpu": {"quota": 8}}],
        "jobs": [
            {
                "name": "run",
                "queue": "a",
                "min_available": 1,
                "tasks": [
                    {"name": f"run-{i}", "gpus": 1, "status": "running", "node": "n1"} for i in range(8)
                ],
            },
            {
                "name": "j1",
                "queue": "b",
                "age_minutes": 2,
                "tasks": [{"name": "j1-0", "gpus": 1, "extended": {"rdma/ib": 1}}],
            },
            {"name": "j2", "queue": "b", "age_minutes": 1, "tasks": [{"name": "j2-0", "gpus": 1}]},
        ],
        "expect": {"tasks": {"j1-0": {"status": "pending"}, "j2-0": {"status": "pipelined", "node": "n1"}}},
    }
    diffs, _ = run_doc(doc)
    assert diffs == []


def _signatures(*tasks: dict[str, Any]) -> list[tuple[str, ...]]:
    from scheduler.conformance.runner import NOW_MS, load_state
    from scheduler.engine.actions.signatures import signature
    from scheduler.engine.cycle import open_session

    doc = {
        "run": {"mode": "single_pass", "phase": "reclaim"},
        "cluster": {"nodes": [{"name": "n1"}]},
        "queues": [{"name": "q"}],
        "jobs": [
            {"name": f"j{i}", "queue": "q", "tasks": [{"name": f"j{i}-0"} | t]} for i, t in enumerate(tasks)
        ],
    }
    state, config = load_state(doc)
    ssn = open_session(state, config, NOW_MS)
    return [signature(ssn.job_by_uid[f"j{i}"]) for i in range(len(tasks))]


def test_signatures_tell_terms_apart_but_not_jobs_selecting_their_own_pods_alike() -> None:
    def anti(app: str) -> list[dict[str, Any]]:
        return [{"label_selector": {"match_labels": {"app": app}}, "topology_key": "kubernetes.io/hostname"}]

    own_a, own_b = (
        {"labels": {"app": "a"}, "pod_anti_affinity": anti("a")},
        {"labels": {"app": "b"}, "pod_anti_affinity": anti("b")},
    )
    db, cache = (
        {"labels": {"app": "a"}, "pod_anti_affinity": anti("db")},
        {"labels": {"app": "a"}, "pod_anti_affinity": anti("cache")},
    )
    s = _signatures(own_a, own_b, db, cache, {"labels": {"app": "a"}})
    assert s[0] == s[1]  # each spreads its own replicas: same shape
    assert len({s[0], s[2], s[3], s[4]}) == 4  # repelling db, cache, or nothing are different constraints
