"""Writes the kube-scheduler volume conformance scenarios (scheduler/conformance/scenarios/kube-scheduler/
volumezone/, volumebinding/).

Each case is translated by hand from a table test of kube-scheduler's volume plugins (k8s.io/kubernetes
v1.36.3, ``pkg/scheduler/framework/plugins/{volumezone,volumebinding}/*_test.go``), in the ``filter`` mode
of scheduler/conformance/scenarios/kube-scheduler/SCHEMA.md. The Go tests state PersistentVolumeClaims,
PersistentVolumes and StorageClasses; a scenario states what ingest makes of them: each claim of the
incoming pod is resolved here by ingest's own code (:func:`ingest.kube.volumes.claim`) from the same
objects, so a scenario checks ingest's matching (class, capacity, phase, pre-binding, provisioner,
allowed topologies) together with the engine's per-node filter. ``expect.volumes`` is, where the Go test
states it, the volume each WaitForFirstConsumer claim binds to on a node ("" = provisioned there).

The files are data, checked in; re-run ``PYTHONPATH=. python3 tools/kube_scheduler_volume_scenarios.py``
after editing a table.
"""

from __future__ import annotations

import json
import re
import shutil
from typing import Any

from kube_scheduler_scenarios import OUT, PLUGINS, VERSION, one_queue

from ingest.events import VolumeClaim
from ingest.kube.volumes import claim as resolve_claim

Doc = dict[str, Any]
CASES: list[tuple[str, Doc]] = []

BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
HOSTNAME = "kubernetes.io/hostname"

PRE_FILTER_REFUSES = (
    "kube-scheduler's PreFilter refuses the pod (an error status) until the claim's binding is complete; "
    "ingest holds the claim as an unbound Immediate one, which the engine refuses on every node "
    "(VolumeUnboundImmediate)"
)


# --- Kubernetes objects, as the Go tests build them ------------------------------------------------------


def pvc(
    name: str,
    cls: str | None,
    size: str | None = None,
    volume: str = "",
    bound: bool = True,
    ns: str = "default",
    annotations: dict[str, str] | None = None,
) -> Doc:
    """A claim: ``volume`` set and ``bound`` = bound (bind-completed), not ``bound`` = pre-bound."""
    spec: Doc = {"volumeMode": "Filesystem"}
    if cls is not None:
        spec["storageClassName"] = cls
    if size is not None:
        spec["resources"] = {"requests": {"storage": size}}
    ann = dict(annotations or {})
    if volume:
        spec["volumeName"] = volume
        if bound:
            ann["pv.kubernetes.io/bind-completed"] = "yes"
    meta: Doc = {"name": name, "namespace": ns, "uid": "pvc-uid"}
    if ann:
        meta["annotations"] = ann
    return {"metadata": meta, "spec": spec}


def pv(
    name: str,
    cls: str = "",
    capacity: str | None = None,
    affinity: dict[str, list[str]] | None = None,
    claim: Doc | None = None,
    phase: str | None = "Available",
    labels: dict[str, str] | None = None,
) -> Doc:
    """A volume: ``affinity`` is one node-selector term (key In values), ``claim`` its claimRef."""
    spec: Doc = {"storageClassName": cls, "volumeMode": "Filesystem"}
    if capacity is not None:
        spec["capacity"] = {"storage": capacity}
    if affinity:
        exprs = [{"key": k, "operator": "In", "values": v} for k, v in sorted(affinity.items())]
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": exprs}]}}
    if claim is not None:
        m = claim["metadata"]
        spec["claimRef"] = {"name": m["name"], "namespace": m["namespace"], "uid": m["uid"]}
    out: Doc = {"metadata": {"name": name}, "spec": spec}
    if labels:
        out["metadata"]["labels"] = labels
    if phase:
        out["status"] = {"phase": phase}
    return out


def node(name: str, **labels: str) -> Doc:
    """volume_binding_test.go's makeNode: the hostname label and `labels`."""
    return {"name": name, "labels": {HOSTNAME: name} | labels}


def resolve(name: str, pvcs: list[Doc], pvs: list[Doc], classes: dict[str, Doc]) -> Doc:
    """The pod's claim `name` as ingest resolves it from these objects (validated by the contract)."""
    c = next((x for x in pvcs if x["metadata"]["name"] == name), None)
    spec = (c or {}).get("spec", {})
    vol = next((x for x in pvs if x["metadata"]["name"] == spec.get("volumeName")), None)
    cls = classes.get(spec.get("storageClassName") or "") if c is not None else None
    got = resolve_claim(name, c, vol, cls, pvs)
    return VolumeClaim.model_validate(got).model_dump(mode="json", exclude_defaults=True) | {"claim": name}


# --- scenario ------------------------------------------------------------------------------------------


def case(
    plugin: str,
    file: str,
    test: str,
    name: str,
    nodes: list[Doc],
    volumes: list[Doc],
    expect: dict[str, str | list[str] | None],
    note: str | None = None,
    chosen: dict[str, dict[str, str]] | None = None,
) -> None:
    """One scenario: the incoming pod mounts `volumes` (resolved claims); `expect` maps each node to the
    reason code the filters give it (None: every filter passes); `chosen` the volume each
    WaitForFirstConsumer claim binds to on a node."""
    source: Doc = {"repository": VERSION, "file": f"{PLUGINS}/{plugin}/{file}", "test": test, "case": name}
    if note:
        source["note"] = note
    task: Doc = {"name": "incoming", "cpu_millicores": 0, "memory_bytes": 0}
    if volumes:
        task["volumes"] = volumes
    want: Doc = {"filter": expect}
    if chosen:
        want["volumes"] = chosen
    doc: Doc = {
        "name": name,
        "source": source,
        "strict": True,
        "run": {"mode": "filter", "task": "incoming"},
        "cluster": {"nodes": nodes},
        "queues": one_queue(),
        "jobs": [{"name": "incoming", "queue": "q", "priority": 50, "min_available": 1, "tasks": [task]}],
        "expect": want,
    }
    CASES.append((plugin, doc))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:70].rstrip("-")


def write() -> int:
    """Write every case (one file each, numbered per plugin) into its plugin's folder; returns how many."""
    plugins = {p for p, _ in CASES}
    for p in plugins:
        if (OUT / p).exists():
            shutil.rmtree(OUT / p)
    counts: dict[str, int] = {}
    for plugin, doc in CASES:
        counts[plugin] = counts.get(plugin, 0) + 1
        path = OUT / plugin / f"{counts[plugin]:03d}-{_slug(doc['name'])}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2) + "\n")
    return len(CASES)


# --- volumezone/volume_zone_test.go ---------------------------------------------------------------------

ZC = "VolumeZoneConflict"


def _zone_pvs(volumes: dict[str, dict[str, str]]) -> dict[str, Doc]:
    """PVC name -> the claim bound to the volume with these labels (the tests' PVC_x -> Vol_x listers)."""
    out = {}
    for claim, labels in volumes.items():
        vol = "vol-" + claim.removeprefix("pvc-")
        c = pvc(claim, None, volume=vol)
        out[claim] = resolve(claim, [c], [pv(vol, labels=labels)], {})
    return out


def _volume_zone() -> None:
    f = "volume_zone_test.go"
    single = _zone_pvs(
        {
            "pvc-1": {BETA_ZONE: "us-west1-a"},
            "pvc-2": {BETA_REGION: "us-west1", "uselessLabel": "none"},
            "pvc-stable-1": {ZONE: "us-west1-a"},
            "pvc-stable-2": {REGION: "us-west1", "uselessLabel": "none"},
            "pvc-stable-3": {ZONE: "us-west1-a", REGION: "us-west1-a"},
        }
    )
    useless = {"uselessLabel": "none"}
    rows: list[tuple[str, list[str], dict[str, str], str | None]] = [
        ("pod without volume", [], {BETA_ZONE: "us-west1-a"}, None),
        ("node without labels", ["pvc-1"], {}, None),
        ("beta zone label matched", ["pvc-1"], {BETA_ZONE: "us-west1-a"} | useless, None),
        ("beta region label matched", ["pvc-2"], {BETA_REGION: "us-west1"} | useless, None),
        ("beta region label doesn't match", ["pvc-2"], {BETA_REGION: "no_us-west1"} | useless, ZC),
        ("beta zone label doesn't match", ["pvc-1"], {BETA_ZONE: "no_us-west1-a"} | useless, ZC),
        ("zone label matched", ["pvc-stable-1"], {ZONE: "us-west1-a"} | useless, None),
        ("region label matched", ["pvc-stable-2"], {REGION: "us-west1"} | useless, None),
        ("region label doesn't match", ["pvc-stable-2"], {REGION: "no_us-west1"} | useless, ZC),
        ("zone label doesn't match", ["pvc-stable-1"], {ZONE: "no_us-west1-a"} | useless, ZC),
        ("pv with zone and region, node with only zone", ["pvc-stable-3"], {ZONE: "us-west1-a"}, ZC),
        ("pv with zone,node with beta zone", ["pvc-stable-1"], {BETA_ZONE: "us-west1-a"}, ZC),
        ("pv with beta label,node with ga label, matched", ["pvc-1"], {ZONE: "us-west1-a"}, None),
        ("pv with beta label,node with ga label, don't match", ["pvc-1"], {ZONE: "us-west1-b"}, ZC),
    ]
    for name, claims, labels, want in rows:
        nodes = [{"name": "host1", "labels": labels}]
        case("volumezone", f, "TestSingleZone", name, nodes, [single[c] for c in claims], {"host1": want})

    multi = _zone_pvs(
        {
            "pvc-1": {BETA_ZONE: "us-west1-a"},
            "pvc-2": {BETA_ZONE: "us-west1-b", "uselessLabel": "none"},
            "pvc-3": {BETA_ZONE: "us-west1-c__us-west1-a"},
            "pvc-stable-1": {ZONE: "us-west1-a"},
            "pvc-stable-2": {ZONE: "us-west1-c__us-west1-a"},
        }
    )
    rows = [
        ("node without labels", ["pvc-3"], {}, None),
        ("beta zone label matched", ["pvc-3"], {BETA_ZONE: "us-west1-a"} | useless, None),
        ("beta zone label doesn't match", ["pvc-1"], {BETA_ZONE: "us-west1-b"} | useless, ZC),
        ("zone label matched", ["pvc-stable-2"], {ZONE: "us-west1-a"} | useless, None),
        ("zone label doesn't match", ["pvc-stable-1"], {ZONE: "us-west1-b"} | useless, ZC),
    ]
    for name, claims, labels, want in rows:
        nodes = [{"name": "host1", "labels": labels}]
        case("volumezone", f, "TestMultiZone", name, nodes, [multi[c] for c in claims], {"host1": want})

    # TestWithBinding: StorageClasses Class_Immediate (no binding mode: the API server defaults it to
    # Immediate) and Class_Wait (WaitForFirstConsumer); Class_0 does not exist.
    classes = {
        "class-immediate": {"volumeBindingMode": "Immediate"},
        "class-wait": {"volumeBindingMode": "WaitForFirstConsumer"},
    }
    pvs = [pv("vol-1", labels={BETA_ZONE: "us-west1-a"})]
    claims = {
        "pvc-1": pvc("pvc-1", None, volume="vol-1"),
        "pvc-nosc": pvc("pvc-nosc", "class-0"),
        "pvc-emptysc": pvc("pvc-emptysc", None),
        "pvc-waitsc": pvc("pvc-waitsc", "class-wait"),
        "pvc-immediatesc": pvc("pvc-immediatesc", "class-immediate"),
    }
    host = [{"name": "host1", "labels": {BETA_ZONE: "us-west1-a", "uselessLabel": "none"}}]
    no_class = (
        "the Go test's plugin refuses a claim of no class or a missing class in PreFilter; ingest holds it as "
        "an unbound Immediate claim (no class means Immediate binding), which the engine refuses "
        "(VolumeUnboundImmediate)"
    )
    wait_note = (
        "VolumeZone skips the unbound WaitForFirstConsumer claim; with no volume of its class and a class "
        "without a provisioner, the default chain's VolumeBinding filter refuses the node"
    )
    rows2: list[tuple[str, str, str | None, str | None]] = [
        ("label zone failure domain matched", "pvc-1", None, None),
        ("unbound volume empty storage class", "pvc-emptysc", "VolumeUnboundImmediate", no_class),
        ("unbound volume no storage class", "pvc-nosc", "VolumeUnboundImmediate", no_class),
        (
            "unbound volume immediate binding mode",
            "pvc-immediatesc",
            "VolumeUnboundImmediate",
            "the unbound Immediate claim is refused (PreFilter) in both",
        ),
        ("unbound volume wait binding mode", "pvc-waitsc", "VolumeBindConflict", wait_note),
    ]
    for name, c, want, note in rows2:
        vol = resolve(c, list(claims.values()), pvs, classes)
        case("volumezone", f, "TestWithBinding", name, host, [vol], {"host1": want}, note)


# --- volumebinding/binder_test.go -----------------------------------------------------------------------

NODE_KEY = "nodeKey"
WAIT = "waitClass"
IMMEDIATE = "immediateClass"
WAIT_PROV = "waitClassWithProvisioner"
TOPO_MISMATCH = "topoMismatchClass"
BINDER_CLASSES: dict[str, Doc] = {
    WAIT_PROV: {
        "volumeBindingMode": "WaitForFirstConsumer",
        "provisioner": "test-provisioner",
        "allowedTopologies": [
            {"matchLabelExpressions": [{"key": NODE_KEY, "values": ["node1", "reference-value"]}]}
        ],
    },
    IMMEDIATE: {"volumeBindingMode": "Immediate"},
    WAIT: {"volumeBindingMode": "WaitForFirstConsumer", "provisioner": "kubernetes.io/no-provisioner"},
    TOPO_MISMATCH: {
        "volumeBindingMode": "WaitForFirstConsumer",
        "provisioner": "test-provisioner",
        "allowedTopologies": [{"matchLabelExpressions": [{"key": NODE_KEY, "values": ["reference-value"]}]}],
    },
}


def _binder_objects() -> tuple[dict[str, Doc], dict[str, Doc]]:
    """The claims and volumes binder_test.go declares (namespace testns)."""
    c = {
        "unbound": pvc("unbound-pvc", WAIT, "1G", ns="testns"),
        "unbound2": pvc("unbound-pvc2", WAIT, "5G", ns="testns"),
        "prebound": pvc("prebound-pvc", WAIT, "1G", "pv-node1a", bound=False, ns="testns"),
        "bound": pvc("bound-pvc", WAIT, "1G", "pv-bound", ns="testns"),
        "immediate-unbound": pvc("immediate-unbound-pvc", IMMEDIATE, "1G", ns="testns"),
        "immediate-bound": pvc("immediate-bound-pvc", IMMEDIATE, "1G", "pv-bound-immediate", ns="testns"),
        "provisioned": pvc("provisioned-pvc", WAIT_PROV, "1Gi", ns="testns"),
        "no-provisioner": pvc("no-provisioner-pvc", WAIT, "1Gi", ns="testns"),
        "topo-mismatch": pvc("topo-mismatch-pvc", TOPO_MISMATCH, "1Gi", ns="testns"),
        "selected-node": pvc(
            "provisioned-pvc",
            WAIT_PROV,
            "1Gi",
            ns="testns",
            annotations={"volume.kubernetes.io/selected-node": "node1"},
        ),
    }
    v = {
        "node1a": pv("pv-node1a", WAIT, "5G", {NODE_KEY: ["node1"]}),
        "node1b": pv("pv-node1b", WAIT, "10G", {NODE_KEY: ["node1"]}),
        "node2": pv("pv-node2", WAIT, "1G", {NODE_KEY: ["node2"]}),
        "bound": pv("pv-bound", WAIT, "1G", {NODE_KEY: ["node1"]}, c["bound"]),
        "node1a-bound": pv("pv-node1a", WAIT, "5G", {NODE_KEY: ["node1"]}, c["unbound"]),
        "bound-immediate": pv(
            "pv-bound-immediate", IMMEDIATE, "1G", {NODE_KEY: ["node1"]}, c["immediate-bound"]
        ),
        "bound-immediate-node2": pv(
            "pv-bound-immediate", IMMEDIATE, "1G", {NODE_KEY: ["node2"]}, c["immediate-bound"]
        ),
    }
    return c, v


def _binder() -> None:
    f = "binder_test.go"
    c, v = _binder_objects()
    node1 = [{"name": "node1", "labels": {NODE_KEY: "node1"}}]
    bc, nc = "VolumeBindConflict", "VolumeNodeAffinity"
    rows: list[tuple[str, str, list[str], list[str], str | None, dict[str, str] | None, str | None]] = [
        ("no-volumes", "TestFindPodVolumesWithoutProvisioning", [], [], None, None, None),
        (
            "pvc-not-found",
            "TestFindPodVolumesWithoutProvisioning",
            ["!bound"],
            [],
            "VolumeUnboundImmediate",
            None,
            PRE_FILTER_REFUSES,
        ),
        ("bound-pvc", "TestFindPodVolumesWithoutProvisioning", ["bound"], ["bound"], None, None, None),
        (
            "bound-pvc,pv-not-exists",
            "TestFindPodVolumesWithoutProvisioning",
            ["bound"],
            [],
            "VolumeUnboundImmediate",
            None,
            "kube-scheduler's Filter refuses the node (a claim bound to a missing volume); ingest holds the claim "
            "as an unbound Immediate one, refused on every node",
        ),
        (
            "prebound-pvc",
            "TestFindPodVolumesWithoutProvisioning",
            ["prebound"],
            ["node1a-bound"],
            "VolumeUnboundImmediate",
            None,
            PRE_FILTER_REFUSES,
        ),
        (
            "unbound-pvc,pv-same-node",
            "TestFindPodVolumesWithoutProvisioning",
            ["unbound"],
            ["node2", "node1a", "node1b"],
            None,
            {"unbound-pvc": "pv-node1a"},
            None,
        ),
        (
            "unbound-pvc,pv-different-node",
            "TestFindPodVolumesWithoutProvisioning",
            ["unbound"],
            ["node2"],
            bc,
            None,
            None,
        ),
        (
            "two-unbound-pvcs",
            "TestFindPodVolumesWithoutProvisioning",
            ["unbound", "unbound2"],
            ["node1a", "node1b"],
            None,
            {"unbound-pvc": "pv-node1a", "unbound-pvc2": "pv-node1b"},
            None,
        ),
        (
            "two-unbound-pvcs,order-by-size",
            "TestFindPodVolumesWithoutProvisioning",
            ["unbound2", "unbound"],
            ["node1a", "node1b"],
            None,
            {"unbound-pvc": "pv-node1a", "unbound-pvc2": "pv-node1b"},
            None,
        ),
        (
            "two-unbound-pvcs,partial-match",
            "TestFindPodVolumesWithoutProvisioning",
            ["unbound", "unbound2"],
            ["node1a"],
            bc,
            None,
            None,
        ),
        (
            "one-bound,one-unbound",
            "TestFindPodVolumesWithoutProvisioning",
            ["unbound", "bound"],
            ["bound", "node1a"],
            None,
            {"unbound-pvc": "pv-node1a"},
            None,
        ),
        (
            "one-bound,one-unbound,no-match",
            "TestFindPodVolumesWithoutProvisioning",
            ["unbound", "bound"],
            ["bound", "node2"],
            bc,
            None,
            None,
        ),
        (
            "one-prebound,one-unbound",
            "TestFindPodVolumesWithoutProvisioning",
            ["unbound", "prebound"],
            ["node1a", "node1b"],
            "VolumeUnboundImmediate",
            None,
            PRE_FILTER_REFUSES,
        ),
        (
            "immediate-bound-pvc",
            "TestFindPodVolumesWithoutProvisioning",
            ["immediate-bound"],
            ["bound-immediate"],
            None,
            None,
            None,
        ),
        (
            "immediate-bound-pvc-wrong-node",
            "TestFindPodVolumesWithoutProvisioning",
            ["immediate-bound"],
            ["bound-immediate-node2"],
            nc,
            None,
            None,
        ),
        (
            "immediate-unbound-pvc",
            "TestFindPodVolumesWithoutProvisioning",
            ["immediate-unbound"],
            [],
            "VolumeUnboundImmediate",
            None,
            None,
        ),
        (
            "immediate-unbound-pvc,delayed-mode-bound",
            "TestFindPodVolumesWithoutProvisioning",
            ["immediate-unbound", "bound"],
            ["bound"],
            "VolumeUnboundImmediate",
            None,
            None,
        ),
        (
            "immediate-unbound-pvc,delayed-mode-unbound",
            "TestFindPodVolumesWithoutProvisioning",
            ["immediate-unbound", "unbound"],
            [],
            "VolumeUnboundImmediate",
            None,
            None,
        ),
        (
            "one-provisioned",
            "TestFindPodVolumesWithProvisioning",
            ["provisioned"],
            [],
            None,
            {"provisioned-pvc": ""},
            None,
        ),
        (
            "two-unbound-pvcs,one-matched,one-provisioned",
            "TestFindPodVolumesWithProvisioning",
            ["unbound", "provisioned"],
            ["node1a"],
            None,
            {"unbound-pvc": "pv-node1a", "provisioned-pvc": ""},
            None,
        ),
        (
            "one-bound,one-provisioned",
            "TestFindPodVolumesWithProvisioning",
            ["bound", "provisioned"],
            ["bound"],
            None,
            {"provisioned-pvc": ""},
            None,
        ),
        (
            "one-binding,one-selected-node",
            "TestFindPodVolumesWithProvisioning",
            ["bound", "selected-node"],
            ["bound"],
            None,
            {"provisioned-pvc": ""},
            None,
        ),
        (
            "immediate-unbound-pvc",
            "TestFindPodVolumesWithProvisioning",
            ["immediate-unbound"],
            [],
            "VolumeUnboundImmediate",
            None,
            None,
        ),
        (
            "one-immediate-bound,one-provisioned",
            "TestFindPodVolumesWithProvisioning",
            ["immediate-bound", "provisioned"],
            ["bound-immediate"],
            None,
            {"provisioned-pvc": ""},
            None,
        ),
        ("invalid-provisioner", "TestFindPodVolumesWithProvisioning", ["no-provisioner"], [], bc, None, None),
        (
            "volume-topology-unsatisfied",
            "TestFindPodVolumesWithProvisioning",
            ["topo-mismatch"],
            [],
            bc,
            None,
            None,
        ),
    ]
    for name, test, claims, vols, want, chosen, note in rows:
        pvs = [v[k] for k in vols]
        # "!x": the pod mounts claim x, which does not exist (the claim cache is empty).
        objs = [c[k] for k in claims if not k.startswith("!")]
        names = [c[k.lstrip("!")]["metadata"]["name"] for k in claims]
        resolved = [resolve(n, objs, pvs, BINDER_CLASSES) for n in names]
        n = "no CSIDriver"
        case(
            "volumebinding",
            f,
            test,
            f"{n}/{name}",
            node1,
            resolved,
            {"node1": want},
            note,
            {"node1": chosen} if chosen else None,
        )


# --- volumebinding/volume_binding_test.go TestVolumeBinding ------------------------------------------------


def _volume_binding() -> None:
    f, t = "volume_binding_test.go", "TestVolumeBinding"
    wait, hdd, immediate = "wait-sc", "wait-hdd-sc", "immediate-sc"
    classes = {
        wait: {"volumeBindingMode": "WaitForFirstConsumer"},
        hdd: {"volumeBindingMode": "WaitForFirstConsumer"},
        immediate: {"volumeBindingMode": "Immediate"},
    }
    bc = "VolumeBindConflict"

    def one(
        name: str,
        nodes: list[Doc],
        claims: list[str],
        pvcs: list[Doc],
        pvs: list[Doc],
        want: dict[str, str | list[str] | None],
        note: str | None = None,
    ) -> None:
        vols = [resolve(c, pvcs, pvs, classes) for c in claims]
        case("volumebinding", f, t, name, nodes, vols, want, note)

    na = [node("node-a")]
    one("pod has not pvcs", na, [], [], [], {"node-a": None})
    one(
        "all bound",
        na,
        ["pvc-a"],
        [pvc("pvc-a", wait, volume="pv-a")],
        [pv("pv-a", wait)],
        {"node-a": None},
    )
    one("PVC does not exist", na, ["pvc-a"], [], [], {"node-a": "VolumeUnboundImmediate"}, PRE_FILTER_REFUSES)
    one(
        "Part of PVCs do not exist",
        na,
        ["pvc-a", "pvc-b"],
        [pvc("pvc-a", wait, volume="pv-a")],
        [],
        {"node-a": "VolumeUnboundImmediate"},
        PRE_FILTER_REFUSES,
    )
    one(
        "immediate claims not bound",
        na,
        ["pvc-a"],
        [pvc("pvc-a", immediate)],
        [],
        {"node-a": "VolumeUnboundImmediate"},
    )
    one("unbound claims no matches", na, ["pvc-a"], [pvc("pvc-a", wait)], [], {"node-a": bc})
    one(
        "bound and unbound unsatisfied",
        [node("node-a", foo="barbar")],
        ["pvc-a", "pvc-b"],
        [pvc("pvc-a", wait, volume="pv-a"), pvc("pvc-b", wait)],
        [pv("pv-a", wait, affinity={"foo": ["bar"]})],
        {"node-a": ["VolumeNodeAffinity", bc]},
        "kube-scheduler reports both reasons; Hourglass names the first (the bound volume's node affinity)",
    )
    one(
        "pv not found",
        na,
        ["pvc-a"],
        [pvc("pvc-a", wait, volume="pv-a")],
        [],
        {"node-a": "VolumeUnboundImmediate"},
        "kube-scheduler's Filter refuses the node (a claim bound to a missing volume); ingest holds the claim as "
        "an unbound Immediate one, refused on every node",
    )
    local = [
        pv(f"pv-{n}-{i}", wait, size, {HOSTNAME: [f"node-{n}"]})
        for n, size in (("a", "200Gi"), ("b", "100Gi"))
        for i in (0, 1)
    ]
    score_note = "the Go test also checks StorageCapacityScoring scores (a feature gate), which Hourglass does not model"
    one(
        "local volumes with close capacity are preferred",
        [node(n) for n in ("node-a", "node-b", "node-c")],
        ["pvc-a"],
        [pvc("pvc-a", wait, "50Gi")],
        local,
        {"node-a": None, "node-b": None, "node-c": bc},
        score_note,
    )
    one(
        "local volumes with close capacity are preferred (multiple pvcs)",
        [node(n) for n in ("node-a", "node-b", "node-c")],
        ["pvc-0", "pvc-1"],
        [pvc("pvc-0", wait, "50Gi"), pvc("pvc-1", hdd, "100Gi")],
        [
            pv(f"pv-{n}-{i}", wait if i < 2 else hdd, size, {HOSTNAME: [f"node-{n}"]})
            for n, size in (("a", "200Gi"), ("b", "100Gi"))
            for i in range(4)
        ],
        {"node-a": None, "node-b": None, "node-c": bc},
        score_note,
    )
    zones = [
        node(f"zone-{z}-node-{n}", **{REGION: f"region-{z}", ZONE: f"zone-{z}"}) for z in "abc" for n in "ab"
    ]
    zonal = [
        pv(f"pv-{z}-{i}", wait, size, {REGION: [f"region-{z}"], ZONE: [f"zone-{z}"]})
        for z, size in (("a", "200Gi"), ("b", "100Gi"))
        for i in (0, 1)
    ]
    one(
        "zonal volumes with close capacity are preferred",
        zones,
        ["pvc-a"],
        [pvc("pvc-a", wait, "50Gi")],
        zonal,
        {n["name"]: (bc if "zone-c" in n["name"] else None) for n in zones},
        score_note,
    )


def main() -> None:
    """Build every table and write the files."""
    _volume_zone()
    _binder()
    _volume_binding()
    print(f"wrote {write()} scenarios under {OUT}")


if __name__ == "__main__":
    main()
