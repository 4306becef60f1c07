"""Property: on random pods and nodes, Hourglass's verdict for NodeResourcesFit (CPU, memory, ephemeral storage,
an extended resource, pod slots; containers, init containers, native sidecars, overhead) and for InterPodAffinity
with existing pods' own terms (ours and other schedulers') equals a small reference written directly from
kube-scheduler v1.36's code paths.

The reference is a transcription of the Go, independent of the engine:

- ``resource.PodRequests`` / ``AggregateContainerRequests`` (k8s.io/component-helpers v0.36.3,
  resource/helpers.go): containers summed; each init container's use is its request plus the sidecars
  (``restartPolicy: Always``) started before it, a sidecar also adds to the total; the pod needs the larger of
  the two per resource; a pod-level request (``spec.resources``, CPU and memory) replaces that; then
  ``spec.overhead`` is added. A container's missing request is its limit (the API
  server's defaulting, before kube-scheduler sees the pod).
- ``noderesources.fitsRequest`` (noderesources/fit.go): too many pods, then (unless the pod asks for nothing)
  CPU, memory, ephemeral storage and each scalar resource against allocatable minus the requests of every pod
  on the node.
- ``InterPodAffinity.Filter`` (interpodaffinity/filtering.go): the incoming pod's required anti-affinity
  (``satisfyPodAntiAffinity``), then existing pods' required anti-affinity terms that match the incoming pod
  (``getExistingAntiAffinityCounts`` / ``satisfyExistingPodsAntiAffinity``), with ``AffinityTerm.Matches``: the
  term's namespaces (its pod's own when none are listed) and its label selector.

Pods go through ingest (``pod_requests``, ``foreign_pod``, ``node_upserted``) into the scenario form the
conformance runner reads, so the check covers the translation as well as the engine.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ingest.kube import translate as kube
from scheduler.conformance.runner import filter_verdicts

# --- the reference, from the Go -------------------------------------------------------------------------

RESOURCES = ("cpu", "memory", "ephemeral-storage", "example.com/aaa")


def _quantity(name: str, text: str) -> int:
    """A quantity in the reference's units (milli-CPU, bytes, counts); the strings drawn below are few."""
    if name == "cpu":
        return int(text[:-1]) if text.endswith("m") else int(text) * 1000
    if text.endswith("Ki"):
        return int(text[:-2]) * 1024
    return int(text)


def _container_requests(c: dict[str, Any]) -> dict[str, int]:
    res = c.get("resources", {})
    merged = dict(res.get("limits", {})) | dict(res.get("requests", {}))  # API server defaulting
    return {k: _quantity(k, v) for k, v in merged.items()}


def _add(into: dict[str, int], more: dict[str, int]) -> None:  # addResourceList
    for k, v in more.items():
        into[k] = into.get(k, 0) + v


def _max(into: dict[str, int], other: dict[str, int]) -> None:  # maxResourceList
    for k, v in other.items():
        if v > into.get(k, 0):
            into[k] = v


def ref_pod_requests(pod: dict[str, Any]) -> dict[str, int]:
    """resource.PodRequests with AggregateContainerRequests, then the overhead."""
    spec = pod["spec"]
    reqs: dict[str, int] = {}
    for c in spec.get("containers", []):
        _add(reqs, _container_requests(c))
    restartable: dict[str, int] = {}
    init_reqs: dict[str, int] = {}
    for c in spec.get("initContainers", []):
        creqs = _container_requests(c)
        if c.get("restartPolicy") == "Always":
            _add(reqs, creqs)
            _add(restartable, creqs)
            creqs = dict(restartable)
        else:
            tmp: dict[str, int] = {}
            _add(tmp, creqs)
            _add(tmp, restartable)
            creqs = tmp
        _max(init_reqs, creqs)
    _max(reqs, init_reqs)
    level = spec.get("resources", {})
    level_reqs = dict(level.get("limits", {})) | dict(level.get("requests", {}))  # API server defaulting
    for k, v in level_reqs.items():
        if k in ("cpu", "memory"):  # IsSupportedPodLevelResource (and hugepages, not drawn here)
            reqs[k] = _quantity(k, v)
    _add(reqs, {k: _quantity(k, v) for k, v in spec.get("overhead", {}).items()})
    return reqs


_FIT_CODES = {
    "cpu": {"InsufficientCPU"},
    "memory": {"Insufficientmemory"},
    "ephemeral-storage": {"Insufficientephemeral-storage"},
    # kube says "Insufficient example.com/aaa" for both; Hourglass tells a node without it apart.
    "example.com/aaa": {"InsufficientExtendedResource", "ExtendedResourceMissing"},
}


def ref_fits_request(
    pod: dict[str, Any], allocatable: dict[str, str], on_node: list[dict[str, Any]]
) -> set[str]:
    """noderesources.fitsRequest: the reason codes of every insufficient resource (empty: the pod fits)."""
    fails: set[str] = set()
    if len(on_node) + 1 > int(allocatable.get("pods", "110")):
        fails.add("TooManyPods")
    want = ref_pod_requests(pod)
    if not any(want.values()):
        return fails
    used: dict[str, int] = {}
    for p in on_node:
        _add(used, ref_pod_requests(p))
    for name in RESOURCES:
        amount = want.get(name, 0)
        alloc = _quantity(name, allocatable[name]) if name in allocatable else 0
        if amount > 0 and amount > alloc - used.get(name, 0):
            fails |= _FIT_CODES[name]
    return fails


def _term_matches(term: dict[str, Any], term_ns: str, pod_ns: str, pod_labels: dict[str, str]) -> bool:
    """AffinityTerm.Matches (namespaces only, no namespace selector) with a matchLabels selector."""
    namespaces = term.get("namespaces") or [term_ns]
    sel = term["labelSelector"]["matchLabels"]
    return pod_ns in namespaces and all(pod_labels.get(k) == v for k, v in sel.items())


def _anti_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return (
        pod["spec"]
        .get("affinity", {})
        .get("podAntiAffinity", {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", [])
    )


def ref_interpod(
    pod: dict[str, Any], node_labels: dict[str, dict[str, str]], existing: list[dict[str, Any]]
) -> dict[str, str | None]:
    """InterPodAffinity's PreFilter counts and Filter, per node: the first failing check's reason code."""
    ns, labels = pod["metadata"]["namespace"], pod["metadata"]["labels"]
    anti_counts: dict[tuple[str, str], int] = {}  # the incoming pod's terms against existing pods
    existing_counts: dict[tuple[str, str], int] = {}  # existing pods' terms against the incoming pod
    for e in existing:
        on = node_labels[e["spec"]["nodeName"]]
        e_ns, e_labels = e["metadata"]["namespace"], e["metadata"]["labels"]
        for t in _anti_terms(pod):
            if _term_matches(t, ns, e_ns, e_labels) and t["topologyKey"] in on:
                pair = (t["topologyKey"], on[t["topologyKey"]])
                anti_counts[pair] = anti_counts.get(pair, 0) + 1
        for t in _anti_terms(e):
            if _term_matches(t, e_ns, ns, labels) and t["topologyKey"] in on:
                pair = (t["topologyKey"], on[t["topologyKey"]])
                existing_counts[pair] = existing_counts.get(pair, 0) + 1
    out: dict[str, str | None] = {}
    for name, nl in node_labels.items():
        verdict = None
        if any(
            t["topologyKey"] in nl and anti_counts.get((t["topologyKey"], nl[t["topologyKey"]]), 0) > 0
            for t in _anti_terms(pod)
        ):
            verdict = "InterPodAntiAffinity"
        elif any(existing_counts.get(pair, 0) > 0 for pair in nl.items()):
            verdict = "ExistingPodsAntiAffinity"
        out[name] = verdict
    return out


# --- random pods and nodes ------------------------------------------------------------------------------

AMOUNTS = {
    "cpu": ["100m", "500m", "1"],
    "memory": ["512", "1Ki", "2Ki"],
    "ephemeral-storage": ["512", "1Ki", "3Ki"],
    "example.com/aaa": ["1", "2"],
}


@st.composite
def resource_list(draw: st.DrawFn) -> dict[str, str]:
    names = draw(st.lists(st.sampled_from(RESOURCES), unique=True, max_size=3))
    return {n: draw(st.sampled_from(AMOUNTS[n])) for n in sorted(names)}


@st.composite
def container(draw: st.DrawFn, name: str, sidecar_allowed: bool = False) -> dict[str, Any]:
    amounts = draw(resource_list())
    kind = draw(st.sampled_from(["requests", "requests", "limits"]))
    out: dict[str, Any] = {"name": name, "resources": {kind: amounts} if amounts else {}}
    if sidecar_allowed and draw(st.booleans()):
        out["restartPolicy"] = "Always"
    return out


@st.composite
def resource_pod(draw: st.DrawFn, name: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [draw(container(f"c{i}")) for i in range(draw(st.integers(1, 2)))],
    }
    inits = [draw(container(f"i{i}", sidecar_allowed=True)) for i in range(draw(st.integers(0, 3)))]
    if inits:
        spec["initContainers"] = inits
    level = draw(st.sampled_from([None, {"requests": {"cpu": "1"}}, {"limits": {"memory": "1Ki"}}]))
    if level:
        spec["resources"] = level  # pod-level resources (CPU and memory)
    overhead = draw(st.sampled_from([None, {"cpu": "100m"}, {"ephemeral-storage": "512"}]))
    if overhead:
        spec["overhead"] = overhead
    if node is not None:
        spec["nodeName"] = node
        spec["schedulerName"] = "default-scheduler"
    return {"metadata": {"name": name, "namespace": "default", "labels": {}}, "spec": spec}


@st.composite
def allocatable(draw: st.DrawFn) -> dict[str, str]:
    out = {
        "cpu": draw(st.sampled_from(["0", "1", "2"])),
        "memory": draw(st.sampled_from(["0", "2Ki", "4Ki"])),
        "pods": draw(st.sampled_from(["1", "2", "3"])),
    }
    storage = draw(st.sampled_from([None, "0", "1Ki", "4Ki"]))
    if storage is not None:
        out["ephemeral-storage"] = storage
    aaa = draw(st.sampled_from([None, "1", "3"]))
    if aaa is not None:
        out["example.com/aaa"] = aaa
    return out


def _node_doc(name: str, alloc: dict[str, str], labels: dict[str, str]) -> dict[str, Any]:
    ev = kube.node_upserted(
        {"metadata": {"name": name, "labels": labels}, "status": {"allocatable": alloc}}, 0
    )
    return {
        "name": name,
        "labels": dict(ev.labels),
        "cpu_millicores": ev.cpu_millicores,
        "memory_bytes": ev.memory_bytes,
        "max_pods": ev.max_pods,
        "extended": dict(ev.extended),
    }


def _foreign_doc(obj: dict[str, Any]) -> dict[str, Any]:
    ev = kube.foreign_pod(obj, 0)
    return {
        "name": ev.name,
        "namespace": ev.namespace,
        "node": ev.node,
        "labels": dict(ev.labels),
        "cpu_millicores": ev.requests.cpu_millicores,
        "memory_bytes": ev.requests.memory_bytes,
        "extended": dict(ev.requests.extended),
        "pod_anti_affinity": [t.model_dump() for t in ev.pod_anti_affinity],
    }


def _task_doc(obj: dict[str, Any], **extra: Any) -> dict[str, Any]:
    ev = kube.pod_submitted(obj, "pg", 0)
    return {
        "name": ev.name,
        "namespace": ev.namespace,
        "labels": dict(ev.labels),
        "cpu_millicores": ev.requests.cpu_millicores,
        "memory_bytes": ev.requests.memory_bytes,
        "extended": dict(ev.requests.extended),
        "pod_anti_affinity": [t.model_dump() for t in ev.pod_anti_affinity],
    } | extra


def _doc(
    nodes: list[dict[str, Any]],
    incoming: dict[str, Any],
    ours: list[dict[str, Any]],
    foreign: list[dict[str, Any]],
) -> dict[str, Any]:
    jobs = [{"name": t["name"], "queue": "q", "tasks": [t]} for t in ours]
    jobs.append({"name": "p", "queue": "q", "tasks": [incoming]})
    return {
        "run": {"mode": "filter", "task": "p"},
        "cluster": {"nodes": nodes, "foreign_pods": foreign},
        "queues": [{"name": "q"}],
        "jobs": jobs,
    }


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fit_verdict_matches_kube_scheduler_reference(data: st.DataObject) -> None:
    alloc = data.draw(allocatable())
    incoming = data.draw(resource_pod("p"))
    existing = [data.draw(resource_pod(f"e{i}", "n1")) for i in range(data.draw(st.integers(0, 2)))]
    # Existing pods are ours or another scheduler's: both hold what they request.
    mine = data.draw(st.lists(st.booleans(), min_size=len(existing), max_size=len(existing)))
    ours = [_task_doc(e, status="running", node="n1") for e, m in zip(existing, mine, strict=True) if m]
    foreign = [_foreign_doc(e) for e, m in zip(existing, mine, strict=True) if not m]
    doc = _doc([_node_doc("n1", alloc, {})], _task_doc(incoming), ours, foreign)
    used: dict[str, int] = {}
    for e in existing:
        _add(used, ref_pod_requests(e))
    # A node whose pods already hold more CPU or memory than it has refuses even a pod asking for none of
    # it in Hourglass, as in KAI (its Idle check); kube-scheduler skips a resource the pod does not ask for.
    # Only pods of other schedulers can over-commit a node, so only that case is left out.
    assume(all(used.get(r, 0) <= _quantity(r, alloc[r]) for r in ("cpu", "memory")))
    want = ref_fits_request(incoming, alloc, existing)
    got = filter_verdicts(doc)["n1"]
    if want:
        assert got in want, (alloc, incoming, existing, got, want)
    else:
        assert got is None, (alloc, incoming, existing, got)


ZONES = {
    "n1": {"zone": "a", "kubernetes.io/hostname": "n1"},
    "n2": {"zone": "a", "kubernetes.io/hostname": "n2"},
    "n3": {"zone": "b", "kubernetes.io/hostname": "n3"},
    "n4": {"kubernetes.io/hostname": "n4"},
}


@st.composite
def anti_term(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {
        "labelSelector": {
            "matchLabels": draw(
                st.dictionaries(
                    st.sampled_from(["app", "tier"]), st.sampled_from(["x", "y"]), min_size=1, max_size=2
                )
            )
        },
        "topologyKey": draw(st.sampled_from(["zone", "kubernetes.io/hostname", "rack"])),
    }
    namespaces = draw(st.sampled_from([[], ["ns1"], ["ns1", "ns2"]]))
    if namespaces:
        out["namespaces"] = namespaces
    return out


@st.composite
def labelled_pod(draw: st.DrawFn, name: str, node: str | None) -> dict[str, Any]:
    labels = draw(st.dictionaries(st.sampled_from(["app", "tier"]), st.sampled_from(["x", "y"]), max_size=2))
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    terms = draw(st.lists(anti_term(), max_size=2))
    if terms:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}}
    if node is not None:
        spec["nodeName"] = node
        spec["schedulerName"] = "default-scheduler"
    ns = draw(st.sampled_from(["ns1", "ns2"]))
    return {"metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": spec}


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_existing_pods_anti_affinity_matches_kube_scheduler_reference(data: st.DataObject) -> None:
    incoming = data.draw(labelled_pod("p", None))
    existing = [
        data.draw(labelled_pod(f"e{i}", data.draw(st.sampled_from(sorted(ZONES)))))
        for i in range(data.draw(st.integers(0, 4)))
    ]
    mine = data.draw(st.lists(st.booleans(), min_size=len(existing), max_size=len(existing)))
    ours = [
        _task_doc(e, status="running", node=e["spec"]["nodeName"])
        for e, m in zip(existing, mine, strict=True)
        if m
    ]
    foreign = [_foreign_doc(e) for e, m in zip(existing, mine, strict=True) if not m]
    nodes = [{"name": n, "labels": labels} for n, labels in ZONES.items()]
    got = filter_verdicts(_doc(nodes, _task_doc(incoming), ours, foreign))
    assert got == ref_interpod(incoming, ZONES, existing), (incoming, existing, mine)
