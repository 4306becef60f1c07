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
