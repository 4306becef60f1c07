"""A pod is read as the kubelet and kube-scheduler read it: native sidecars are summed with the main
containers and their host ports count; a missing labelSelector selects no pod."""

from __future__ import annotations

from typing import Any

from ingest.kube import translate as kube
from scheduler.conformance.runner import filter_verdicts


def _pod(containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "x"}},
        "spec": {"schedulerName": "hourglass", "containers": containers, **spec},
        "status": {"phase": "Pending"},
    }


def _c(
    name: str, restart: str | None = None, ports: list[dict[str, Any]] | None = None, **requests: str
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "resources": {"requests": requests}}
    if restart:
        out["restartPolicy"] = restart
    if ports:
        out["ports"] = ports
    return out


def test_a_sidecar_is_summed_with_the_main_containers() -> None:
    # A 1-CPU container and a 1-CPU sidecar need 2 CPUs on the node (component-helpers
    # AggregateContainerRequests), not max(1, 1).
    r = kube.pod_requests(_pod([_c("main", cpu="1")], initContainers=[_c("proxy", "Always", cpu="1")]))
    assert r.cpu_millicores == 2000


def test_init_containers_after_a_sidecar_run_beside_it() -> None:
    # kube-scheduler's noderesources fit_test.go TestRestartableInitContainers shape: an init container
    # started after a sidecar needs its own request plus the sidecar's; the pod needs the larger of that
    # and containers + sidecars.
    obj = _pod(
        [_c("main", cpu="1", memory="1Gi")],
        initContainers=[
            _c("sidecar", "Always", cpu="500m", memory="2Gi"),
            _c("setup", cpu="2", memory="1Gi"),
        ],
    )
    r = kube.pod_requests(obj)
    assert (r.cpu_millicores, r.memory_bytes) == (2500, 3 * 2**30)


def test_a_plain_init_container_is_still_the_max() -> None:
    r = kube.pod_requests(_pod([_c("main", cpu="1")], initContainers=[_c("init", cpu="3")]))
    assert r.cpu_millicores == 3000


def test_a_sidecars_host_port_is_the_pods() -> None:
    port = [{"containerPort": 15000, "hostPort": 15000}]
    ports = kube.host_ports(
        "ns/p",
        _pod([_c("main")], initContainers=[_c("proxy", "Always", port), _c("init", None, port)])["spec"],
    )
    assert [(p.port, p.protocol) for p in ports] == [(15000, "TCP")]


def _spread_pod(selector: dict[str, Any] | None) -> dict[str, Any]:
    c: dict[str, Any] = {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}
    if selector is not None:
        c["labelSelector"] = selector
    return _pod([_c("main")], topologySpreadConstraints=[c])


def test_a_missing_label_selector_selects_nothing() -> None:
    ev = kube.pod_submitted(_spread_pod(None), "pg", 1)
    assert ev.topology_spread[0].label_selector is None
    assert kube.pod_submitted(_spread_pod({}), "pg", 1).topology_spread[0].label_selector is not None


def _term_doc(term: dict[str, Any]) -> dict[str, Any]:
    return {
        "run": {"mode": "filter", "task": "p"},
        "cluster": {
            "nodes": [{"name": "n1", "labels": {"zone": "a"}}, {"name": "n2", "labels": {"zone": "b"}}]
        },
        "queues": [{"name": "q"}],
        "jobs": [
            {
                "name": "e",
                "queue": "q",
                "tasks": [{"name": "e", "status": "running", "node": "n1", "labels": {"app": "x"}}],
            },
            {
                "name": "p",
                "queue": "q",
                "tasks": [{"name": "p", "labels": {"app": "x"}, "pod_anti_affinity": [term]}],
            },
        ],
    }


def test_anti_affinity_without_a_selector_repels_no_pod() -> None:
    # interpodaffinity: a term whose labelSelector is missing matches no pod (labels.Nothing()), so it
    # repels nothing; the empty selector {} matches every pod in the namespace.
    assert filter_verdicts(_term_doc({"label_selector": None, "topology_key": "zone"})) == {
        "n1": None,
        "n2": None,
    }
    got = filter_verdicts(_term_doc({"label_selector": {}, "topology_key": "zone"}))
    assert got == {"n1": "InterPodAntiAffinity", "n2": None}


def test_a_dra_pod_is_refused_not_placed_as_cpu_only() -> None:
    # spec.resourceClaims that ingest did not translate (ingest/kube/dra.py resolves the whole-GPU ones and
    # passes them as ``dra``): the pod is refused with a reason of its own (dead letter + Warning Event),
    # never submitted as a CPU-only pod.
    obj = _pod(
        [_c("main", cpu="1")], resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    )
    try:
        kube.pod_submitted(obj, "pg", 1)
    except kube.InvalidObject as err:
        assert (err.reason, err.reason_code) == ("DRANotSupported", "dra_not_supported")
        assert "spec.resourceClaims" in err.message and "Dynamic Resource Allocation" in err.message
    else:
        raise AssertionError("a DRA pod was translated")


def _affinity_pod(*terms: dict[str, Any]) -> dict[str, Any]:
    required = {"nodeSelectorTerms": list(terms)}
    return _pod(
        [_c("main")], affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    )


def _name_in(name: str) -> dict[str, Any]:
    return {"key": "metadata.name", "operator": "In", "values": [name]}


def _verdicts(obj: dict[str, Any]) -> dict[str, str | None]:
    """The node-affinity verdict of the translated pod on nodes n1 (foo=bar) and n2 (foo=bar)."""
    ev = kube.pod_submitted(obj, "pg", 1)
    task: dict[str, Any] = {"name": "p", "node_affinity": [t.model_dump() for t in ev.node_affinity]}
    if ev.allowed_nodes is not None:
        task["allowed_nodes"] = ev.allowed_nodes
    doc = {
        "run": {"mode": "filter", "task": "p"},
        "cluster": {"nodes": [{"name": n, "labels": {"foo": "bar"}} for n in ("n1", "n2")]},
        "queues": [{"name": "q"}],
        "jobs": [{"name": "p", "queue": "q", "tasks": [task]}],
    }
    return filter_verdicts(doc)


def test_node_affinity_terms_are_ored_with_match_fields_among_them() -> None:
    # nodeaffinity/node_affinity_test.go "Pod with two terms: matchFields does not match, but
    # matchExpressions matches": on node2, the second term (foo In bar) matches.
    obj = _affinity_pod(
        {"matchFields": [_name_in("n1")]},
        {"matchExpressions": [{"key": "foo", "operator": "In", "values": ["bar"]}]},
    )
    assert _verdicts(obj) == {"n1": None, "n2": None}


def test_match_fields_and_expressions_of_one_term_are_anded() -> None:
    # "Pod with one term: matchFields does not match, but matchExpressions matches" / "both match".
    obj = _affinity_pod(
        {
            "matchFields": [_name_in("n1")],
            "matchExpressions": [{"key": "foo", "operator": "In", "values": ["bar"]}],
        }
    )
    assert _verdicts(obj) == {"n1": None, "n2": "NodeAffinity"}


def test_two_match_fields_of_one_term_are_anded() -> None:
    # "Pod with two conflicting mach field requirements": name In n1 and name In n2 match no node.
    obj = _affinity_pod({"matchFields": [_name_in("n1"), _name_in("n2")]})
    assert _verdicts(obj) == {"n1": "NodeAffinity", "n2": "NodeAffinity"}


def test_terms_of_node_names_are_a_union() -> None:
    # "Pod with two terms of node.Name affinity".
    obj = _affinity_pod({"matchFields": [_name_in("n1")]}, {"matchFields": [_name_in("n2")]})
    assert kube.pod_submitted(obj, "pg", 1).allowed_nodes == ["n1", "n2"]
    assert _verdicts(obj) == {"n1": None, "n2": None}


def test_an_empty_term_matches_no_node() -> None:
    # "Pod with empty MatchExpressions is not a valid value will match no objects and won't schedule onto
    # the node".
    obj = _affinity_pod({"matchExpressions": []})
    assert _verdicts(obj) == {"n1": "NodeAffinity", "n2": "NodeAffinity"}


# ------------------------------------------------------------------ ephemeral storage, foreign pods' terms


def _node(name: str, **allocatable: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", **allocatable}},
    }


def test_ephemeral_storage_is_summed_like_cpu() -> None:
    # component-helpers AggregateContainerRequests, as for CPU: containers and sidecars summed, the largest
    # init-time peak if more, plus overhead; a limit without a request counts as the request.
    obj = _pod(
        [
            _c("main", **{"ephemeral-storage": "1Gi"}),
            {"name": "lim", "resources": {"limits": {"ephemeral-storage": "1Gi"}}},
        ],
        initContainers=[
            _c("sidecar", "Always", **{"ephemeral-storage": "512Mi"}),
            _c("unpack", **{"ephemeral-storage": "3Gi"}),
        ],
        overhead={"ephemeral-storage": "1Mi"},
    )
    # max(1Gi + 1Gi + 512Mi, 3Gi + 512Mi) + 1Mi
    assert kube.pod_requests(obj).extended == {"ephemeral-storage": (3 * 1024 + 512 + 1) * 2**20}
    sidecar = _pod(
        [_c("main", **{"ephemeral-storage": "1Gi"})],
        initContainers=[_c("s", "Always", **{"ephemeral-storage": "1Gi"})],
    )
    assert kube.pod_requests(sidecar).extended == {"ephemeral-storage": 2 * 2**30}


def test_pod_level_resources_replace_the_containers_sum() -> None:
    # component-helpers PodRequests: a pod-level request of CPU / memory / hugepages stands for the
    # containers' (a pod-level limit alone is the request), overhead still added; ephemeral storage is not
    # a pod-level resource, so it stays the containers' sum.
    obj = _pod(
        [_c("a", cpu="1", memory="1Gi", **{"ephemeral-storage": "1Gi"}), _c("b", cpu="1")],
        resources={"requests": {"cpu": "4"}, "limits": {"memory": "8Gi"}},
        overhead={"cpu": "100m"},
    )
    r = kube.pod_requests(obj)
    assert (r.cpu_millicores, r.memory_bytes, r.extended) == (4100, 8 * 2**30, {"ephemeral-storage": 2**30})


def test_node_allocatable_ephemeral_storage_is_read() -> None:
    assert kube.node_upserted(_node("n1", **{"ephemeral-storage": "100Gi"}), 0).extended == {
        "ephemeral-storage": 100 * 2**30
    }


def _storage_doc(pod_request: int, node_bytes: int | None, foreign_bytes: int = 0) -> dict[str, Any]:
    node: dict[str, Any] = {"name": "n1", "labels": {}, "cpu_millicores": 8000, "memory_bytes": 2**34}
    if node_bytes is not None:
        node["extended"] = {"ephemeral-storage": node_bytes}
    doc: dict[str, Any] = {
        "run": {"mode": "filter", "task": "p"},
        "cluster": {"nodes": [node]},
        "queues": [{"name": "q"}],
        "jobs": [
            {
                "name": "p",
                "queue": "q",
                "tasks": [{"name": "p", "extended": {"ephemeral-storage": pod_request}}],
            }
        ],
    }
    if foreign_bytes:
        doc["cluster"]["foreign_pods"] = [
            {"name": "ds", "node": "n1", "extended": {"ephemeral-storage": foreign_bytes}}
        ]
    return doc


def test_ephemeral_storage_is_a_node_filter_with_kube_schedulers_reason() -> None:
    # noderesources/fit.go fitsRequest: "Insufficient ephemeral-storage" when the request exceeds what the
    # node's allocatable leaves; a node that reports none has none (not a missing extended resource).
    assert filter_verdicts(_storage_doc(10, 10)) == {"n1": None}
    assert filter_verdicts(_storage_doc(11, 10)) == {"n1": "Insufficientephemeral-storage"}
    assert filter_verdicts(_storage_doc(1, None)) == {"n1": "Insufficientephemeral-storage"}
    # a pod of another scheduler holds its storage too
    assert filter_verdicts(_storage_doc(6, 10, foreign_bytes=5)) == {"n1": "Insufficientephemeral-storage"}
    assert filter_verdicts(_storage_doc(5, 10, foreign_bytes=5)) == {"n1": None}


def test_a_foreign_pod_keeps_its_inter_pod_terms() -> None:
    anti = {
        "labelSelector": {"matchLabels": {"app": "x"}},
        "topologyKey": "kubernetes.io/hostname",
        "matchLabelKeys": ["tier"],
    }
    preferred = {"weight": 10, "podAffinityTerm": {"labelSelector": {}, "topologyKey": "zone"}}
    obj = _pod(
        [_c("main")],
        nodeName="n1",
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [anti],
                "preferredDuringSchedulingIgnoredDuringExecution": [preferred],
            }
        },
    )
    ev = kube.foreign_pod(obj, 1)
    assert [(t.topology_key, t.weight) for t in ev.pod_anti_affinity] == [
        ("kubernetes.io/hostname", 0),
        ("zone", 10),
    ]
    assert ev.pod_anti_affinity[0].label_selector is not None
    assert ev.pod_anti_affinity[0].label_selector.match_labels == {"app": "x"}
    assert ev.pod_affinity == []


def test_a_foreign_pods_required_anti_affinity_keeps_our_pod_off_its_node() -> None:
    # interpodaffinity/filtering_test.go "verify that PodAntiAffinity from existing pod is respected when
    # pod has no AntiAffinity constraints", with the existing pod bound by another scheduler.
    term = {"label_selector": {"match_labels": {"app": "x"}}, "topology_key": "zone"}
    doc = _term_doc(term)
    doc["jobs"].pop(0)  # the existing pod is not ours
    doc["cluster"]["foreign_pods"] = [
        {"name": "e", "node": "n1", "labels": {"app": "y"}, "pod_anti_affinity": [term]}
    ]
    doc["jobs"][0]["tasks"][0].pop("pod_anti_affinity")
    assert filter_verdicts(doc) == {"n1": "ExistingPodsAntiAffinity", "n2": None}
    # It is leaving: the node can be used once it is gone (pipelining), as for our own pods.
    doc["cluster"]["foreign_pods"][0]["releasing"] = True
    assert filter_verdicts(doc) == {"n1": None, "n2": None}
