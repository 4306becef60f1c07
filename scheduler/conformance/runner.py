"""Conformance scenarios (KAI's table tests as JSON): load one into a snapshot, run it, compare.

The file format is documented in ``scheduler/conformance/scenarios/kai/SCHEMA.md``, with Hourglass's extensions for real
nodes (foreign pods, extended resources, taints, inter-pod affinity, spread, ports, volumes, gates) in
``scheduler/conformance/scenarios/hourglass/SCHEMA.md``. ``run_file`` returns a
:class:`ScenarioResult` with every difference between the expected and the actual outcome.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from scheduler.engine import scoring
from scheduler.engine.cycle import open_session, result_state, run_actions, settle
from scheduler.engine.proportion import ResourceQuota
from scheduler.engine.session import Session, SessionConfig
from scheduler.engine.state import (
    ClusterState,
    CSINode,
    ForeignPod,
    Job,
    Node,
    Pod,
    PodRequest,
    PodStatus,
    Queue,
    Taint,
    Topology,
    csi_node_from_event,
    foreign_pod_from_event,
    placement_fields,
    subgroup_minimum,
    subgroups_from_event,
)
from scheduler.engine.subgroups import SUBGROUP_LABEL

NOW_MS = 1_000_000_000_000  # a fixed logical "now" for scenarios; ages count back from it
PHASES = {
    "allocate": "allocate",
    "consolidation": "consolidation",
    "reclaim": "reclaim",
    "preempt": "preempt",
    "stale_gang_eviction": "stale_gang_eviction",
}
_RES_KEYS = (("gpu", "gpu"), ("cpu_millicores", "cpu"), ("memory_bytes", "memory"))


@dataclass
class ScenarioResult:
    """Outcome of one scenario file."""

    path: str
    name: str
    strict: bool
    diffs: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def passed(self) -> bool:
        return not self.diffs and self.error is None


def _gpu_milli(x: float | None) -> int | None:
    return None if x is None else round(x * 1000)


def _queue_resources(q: dict[str, Any]) -> dict[str, ResourceQuota]:
    out: dict[str, ResourceQuota] = {}
    defaults = {"gpu": (0, None, 0), "cpu": (None, None, 1), "memory": (None, None, 1)}
    for key, res in _RES_KEYS:
        spec = q.get(key)
        quota, limit, weight = defaults[res]
        if spec is not None:
            quota = spec.get("quota", quota)
            limit = spec.get("limit", limit)
            weight = spec.get("over_quota_weight", weight)
        if res == "gpu":
            quota, limit = _gpu_milli(quota), _gpu_milli(limit)
        else:
            quota = None if quota is None else int(quota)
            limit = None if limit is None else int(limit)
        out[res] = ResourceQuota.of(quota, limit, weight)
    return out


def load_state(doc: dict[str, Any]) -> tuple[ClusterState, SessionConfig]:
    """Scenario JSON -> (snapshot, engine config).

    Long on purpose: one pass over the scenario schema's sections (nodes, queues, jobs, pods, topology,
    config), in the order the schema documents them, so each field's translation can be read next to its
    neighbours.
    """
    cfg = doc.get("config", {})
    placement = cfg.get("node_placement", {})
    fs_enabled = cfg.get("queue_fair_share_enabled", True)
    config = SessionConfig(
        gpu_placement=placement.get("gpu", "binpack"),
        cpu_placement=placement.get("cpu", "binpack"),
        gpu_sharing_placement=cfg.get("gpu_sharing_placement", "binpack"),
        fair_share_enabled=fs_enabled,
        stale_grace_ms=int(doc["run"].get("stale_grace_period_seconds", 60) * 1000),
        node_scoring=scoring.check_name(cfg.get("node_scoring", "kai")),
    )
    nodes = tuple(
        Node(
            name=n["name"],
            cpu=n.get("cpu_millicores", 20_000_000),
            memory=n.get("memory_bytes", 20_000_000_000),
            gpus=n.get("gpus", 0),
            gpu_memory_mib=n.get("gpu_memory_mib", 100),
            max_pods=n.get("max_pods", 110),
            labels=n.get("labels", {}),
            taints=tuple(
                Taint(t["key"], t.get("value", ""), t.get("effect", "NoSchedule"))
                for t in n.get("taints", [])
            ),
            ready=n.get("ready", True),
            unschedulable=n.get("unschedulable", False),
            extended=dict(sorted(n.get("extended", {}).items())),
        )
        for n in doc.get("cluster", {}).get("nodes", [])
    )
    queues = []
    for i, q in enumerate(doc.get("queues", [])):
        res = _queue_resources(q)
        if not fs_enabled:
            res = {r: ResourceQuota.of(None, None, 1) for r in res}
        queues.append(
            Queue(
                name=q["name"],
                parent=q.get("parent"),
                resources=res,
                priority=q.get("priority", 100),
                order=i,
            )
        )
    jobs = []
    pods = []
    device_next: Counter[str] = Counter()
    groups: dict[tuple[str, str], int] = {}
    for j in doc.get("jobs", []):
        prio = j.get("priority", 0)
        stale = j.get("stale_for_seconds")
        jobs.append(
            Job(
                uid=j["name"],
                name=j["name"],
                queue=j["queue"],
                priority=prio,
                preemptible=j.get("preemptible", prio < 100),
                created_ms=NOW_MS - int(j.get("age_minutes", 0) * 60_000),
                stale_since_ms=None if stale is None else NOW_MS - int(stale * 1000),
                deleting=j.get("deleting", False),
                **({"min_available": j.get("min_available", len(j["tasks"]))} | _constraint(j)),
            )
        )
        for idx, t in enumerate(j["tasks"]):
            frac = t.get("gpu_fraction")
            req = PodRequest(
                cpu=t.get("cpu_millicores", 1000),
                memory=t.get("memory_bytes", 1_000_000_000),
                gpus=t.get("gpus", 0),
                gpu_fraction_milli=None if frac is None else round(frac * 1000),
                gpu_fraction_devices=t.get("gpu_fraction_devices", 1),
                gpu_memory_mib=t.get("gpu_memory_mib"),
                extended=tuple(sorted(t.get("extended", {}).items())),
            )
            status = PodStatus(t.get("status", "pending"))
            node = t.get("node")
            devices: tuple[int, ...] = ()
            portion = 0
            if node is not None and status is not PodStatus.PENDING:
                if req.is_shared:
                    labels = t.get("gpu_groups") or [None] * req.gpu_fraction_devices
                    devs = []
                    for label in labels:
                        key = (node, str(label)) if label is not None else None
                        if key is not None and key in groups:
                            devs.append(groups[key])
                        else:
                            d = device_next[node]
                            device_next[node] += 1
                            if key is not None:
                                groups[key] = d
                            devs.append(d)
                    devices = tuple(devs)
                    if req.gpu_fraction_milli is not None:
                        portion = req.gpu_fraction_milli
                    else:
                        mem = next((n.gpu_memory_mib for n in nodes if n.name == node), None) or 100
                        mem = mem // 100 * 100
                        portion = -(-(req.gpu_memory_mib or 0) * 100 // mem) * 10
                elif req.gpus:
                    start = device_next[node]
                    device_next[node] += req.gpus
                    devices = tuple(range(start, start + req.gpus))
            pods.append(
                Pod(
                    uid=t.get("name", f"{j['name']}-{idx}"),
                    name=t.get("name", f"{j['name']}-{idx}"),
                    job=j["name"],
                    request=req,
                    status=status,
                    node=node if status is not PodStatus.PENDING else None,
                    gpu_devices=devices,
                    gpu_milli_per_device=portion,
                    task_priority=t.get("order_priority", 0),
                    index=idx,
                    created_ms=NOW_MS - int(j.get("age_minutes", 0) * 60_000),
                    # How long a releasing task's deletion has been going on (KAI's deletionTimestamp age).
                    releasing_ms=None
                    if t.get("releasing_for_seconds") is None
                    else NOW_MS - int(t["releasing_for_seconds"] * 1000),
                    allowed_nodes=tuple(t["allowed_nodes"]) if t.get("allowed_nodes") is not None else None,
                    **_placement(_with_subgroup_label(t)),
                )
            )
    # Devices the scenario placed on are taken in order; make sure the node has that many.
    for name, used in device_next.items():
        node_spec = next((n for n in nodes if n.name == name), None)
        if node_spec is not None and used > node_spec.gpus:
            raise ValueError(f"scenario places {used} GPU devices on node {name} which has {node_spec.gpus}")
    foreign = tuple(_foreign(f) for f in doc.get("cluster", {}).get("foreign_pods", []))
    topologies = tuple(
        sorted((_topology(t) for t in doc.get("cluster", {}).get("topologies", [])), key=_name)
    )
    state = ClusterState(
        nodes=nodes,
        queues=tuple(queues),
        jobs=tuple(jobs),
        pods=tuple(pods),
        foreign_pods=foreign,
        topologies=topologies,
        namespaces=_namespaces(doc.get("cluster", {}).get("namespaces", [])),
        csi_nodes=_csi_nodes(doc.get("cluster", {}).get("csi_nodes", [])),
    )
    return state, config


# Task fields of the real-nodes extension, named as in the event contract (ingest.events.PodSubmitted).
_PLACEMENT_KEYS = (
    "namespace",
    "labels",
    "node_selector",
    "node_affinity",
    "tolerations",
    "host_ports",
    "pod_affinity",
    "pod_anti_affinity",
    "preferred_node_affinity",
    "topology_spread",
    "scheduling_gates",
    "volumes",
    "disks",
)


def _placement(t: dict[str, Any]) -> dict[str, Any]:
    """A task's filter fields, validated by the event contract's models (same errors as ingest)."""
    given = {k: t[k] for k in _PLACEMENT_KEYS if k in t}
    if not given:
        return {}
    from ingest.events import PodSubmitted

    ev = PodSubmitted.model_validate(
        {"at_ms": 0, "name": "scenario", "namespace": "default", "pod_group": "scenario", "created_at_ms": 0}
        | given
    )
    out = placement_fields(ev)
    out.pop("allowed_nodes")  # scenario files say allowed_nodes themselves
    return out


def _with_subgroup_label(t: dict[str, Any]) -> dict[str, Any]:
    """A task's ``subgroup`` as KAI's pod label ``kai.scheduler/subgroup-name``."""
    if "subgroup" not in t:
        return t
    return {**t, "labels": {**t.get("labels", {}), SUBGROUP_LABEL: t["subgroup"]}}


def _namespaces(items: list[dict[str, Any]]) -> tuple[tuple[str, Mapping[str, str]], ...]:
    """Namespaces and their labels (each validated as a NamespaceUpserted event), sorted by name."""
    from ingest.events import NamespaceUpserted

    out: dict[str, Mapping[str, str]] = {}
    for n in items:
        ev = NamespaceUpserted.model_validate(
            {"at_ms": 0, "name": n.get("name"), "labels": n.get("labels", {})}
        )
        out[ev.name] = MappingProxyType(dict(sorted(ev.labels.items())))
    return tuple(sorted(out.items()))


def _csi_nodes(items: list[dict[str, Any]]) -> tuple[tuple[str, CSINode], ...]:
    """Nodes' CSI drivers, attach limits and attached volumes (each validated as a CSINodeUpserted event),
    sorted by node."""
    from ingest.events import CSINodeUpserted

    out = {}
    for n in items:
        ev = CSINodeUpserted.model_validate(
            {
                "at_ms": 0,
                "name": n.get("name"),
                "drivers": n.get("drivers", []),
                "attached": n.get("attached", []),
            }
        )
        out[ev.name] = csi_node_from_event(ev)
    return tuple(sorted(out.items()))


def _name(t: Topology) -> str:
    return t.name


def _topology(t: dict[str, Any]) -> Topology:
    """A KAI Topology (validated as a TopologyUpserted event): ``{name, levels: [label key, ...]}``."""
    from ingest.events import TopologyUpserted

    ev = TopologyUpserted.model_validate({"at_ms": 0, "name": t.get("name"), "levels": t.get("levels")})
    return Topology(ev.name, tuple(ev.levels))


_CONSTRAINT_KEYS = (
    "topology",
    "required_topology_level",
    "preferred_topology_level",
    "subgroups",
    "min_sub_group",
)


def _constraint(j: dict[str, Any]) -> dict[str, Any]:
    """A job's topology constraint (validated as a PodGroupUpserted event would be), as Job fields."""
    given = {k: j[k] for k in _CONSTRAINT_KEYS if k in j}
    if not given:
        return {}
    from ingest.events import PodGroupUpserted

    ev = PodGroupUpserted.model_validate(
        {"at_ms": 0, "name": "scenario", "namespace": "default", "queue": "q", "created_at_ms": 0} | given
    )
    out: dict[str, Any] = {
        "topology": ev.topology,
        "required_level": ev.required_topology_level,
        "preferred_level": ev.preferred_topology_level,
    }
    if ev.subgroups:
        subgroups = subgroups_from_event(ev.subgroups)
        out |= {
            "subgroups": subgroups,
            "min_sub_group": ev.min_sub_group,
            # KAI ignores the PodGroup's minMember when it has subgroups.
            "min_available": subgroup_minimum(subgroups, ev.min_sub_group),
        }
    return out


def _foreign(f: dict[str, Any]) -> ForeignPod:
    """A pod of another scheduler bound to a node (validated as a ForeignPodUpserted event)."""
    from ingest.events import ForeignPodUpserted

    frac = f.get("gpu_fraction")
    ev = ForeignPodUpserted.model_validate(
        {
            "at_ms": 0,
            "name": f["name"],
            "namespace": f.get("namespace", "default"),
            "node": f["node"],
            "requests": {
                "cpu_millicores": f.get("cpu_millicores", 0),
                "memory_bytes": f.get("memory_bytes", 0),
                "gpus": f.get("gpus", 0),
                "gpu_fraction_milli": None if frac is None else round(frac * 1000),
                "extended": f.get("extended", {}),
            },
            "labels": f.get("labels", {}),
            "host_ports": f.get("host_ports", []),
            "releasing": f.get("releasing", False),
            "pod_affinity": f.get("pod_affinity", []),
            "pod_anti_affinity": f.get("pod_anti_affinity", []),
            "volumes": f.get("volumes", []),
            "disks": f.get("disks", []),
        }
    )
    return foreign_pod_from_event(ev)


def _task_views(state: ClusterState) -> dict[str, tuple[str, str | None]]:
    return {p.name: (p.status.value, p.node) for p in state.pods}


def compare(doc: dict[str, Any], state: ClusterState, ssn: Session | None) -> list[str]:
    """Differences between `expect` and the task states in `state`."""
    exp = doc.get("expect", {})
    tasks = _task_views(state)
    by_job: dict[str, list[str]] = {}
    for p in state.pods:
        by_job.setdefault(p.job, []).append(p.name)
    diffs: list[str] = []

    def check(label: str, name: str, want: dict[str, Any]) -> None:
        status, node = tasks[name]
        if status != want["status"]:
            diffs.append(f"{label}: status {status}, expected {want['status']}")
        if "node" in want and node != want["node"]:
            diffs.append(f"{label}: node {node}, expected {want['node']}")
        if "node_any_of" in want and node not in want["node_any_of"]:
            diffs.append(f"{label}: node {node}, expected one of {want['node_any_of']}")

    for job, want in exp.get("jobs", {}).items():
        for tname in by_job.get(job, []):
            check(f"job {job} task {tname}", tname, want)
    for tname, want in exp.get("tasks", {}).items():
        check(f"task {tname}", tname, want)
    for ts in exp.get("task_sets", []):
        got = dict(Counter(tasks[t][0] for t in ts["tasks"]))
        want_counts = {k: v for k, v in ts["status_counts"].items() if v}
        if got != want_counts:
            diffs.append(f"task set {ts['tasks'][0]}..: states {dict(got)}, expected {want_counts}")
        if "node_counts" in ts:
            placed = dict(Counter(tasks[t][1] for t in ts["tasks"] if tasks[t][1] is not None))
            want_nodes = {k: v for k, v in ts["node_counts"].items() if v}
            if placed != want_nodes:
                diffs.append(f"task set {ts['tasks'][0]}..: nodes {placed}, expected {want_nodes}")
    if ssn is not None:
        for job, codes in exp.get("filter_reasons", {}).items():
            ji = ssn.job_by_uid[job]
            raw = ji.fit_errors[-1].details.get("filters") if ji.fit_errors else None
            got = raw if isinstance(raw, dict) else {}
            missing = [c for c in codes if c not in got]
            if missing:
                diffs.append(f"job {job}: filter reasons {sorted(got)}, expected to include {missing}")
        if exp.get("no_decision"):
            from scheduler.engine.record.decisions import decisions_of

            decided = {d.job for d in decisions_of(ssn)}
            for job in exp["no_decision"]:
                if job in decided:
                    diffs.append(f"job {job}: has a decision, expected none (gated pods are not pending yet)")
        for job, text in exp.get("message_contains", {}).items():
            ji = ssn.job_by_uid[job]
            msg = ji.fit_errors[-1].message if ji.fit_errors else ""
            if text not in msg:
                diffs.append(f"job {job}: message {msg!r} does not contain {text!r}")
    if "nodes" in exp and ssn is not None:
        for name, want in exp["nodes"].items():
            n = ssn.node_by_name[name]
            got = {"idle_gpus": n.idle_gpu_count(), "releasing_gpus": n.releasing_gpu_count()}
            for k, v in want.items():
                if got.get(k) != v:
                    diffs.append(f"node {name}: {k} {got.get(k)}, expected {v}")
    return diffs


def filter_verdicts(doc: dict[str, Any]) -> dict[str, str | None]:
    """Run mode ``filter``: the reason code (docs/filters.md) each node gives the pending task
    ``run.task``, or None where every filter passes — kube-scheduler's per-node Filter verdict."""
    from scheduler.engine.placement import fit
    from scheduler.engine.predicates import reason_code

    state, config = load_state(doc)
    ssn = open_session(state, config, NOW_MS)
    name = doc["run"]["task"]
    task = next((t for t in ssn.tasks if t.pod.name == name), None)
    if task is None:
        raise ValueError(f"run.task {name!r} is not a task of the scenario")
    if task.status is not PodStatus.PENDING:
        raise ValueError(f"run.task {name!r} is not pending")
    out: dict[str, str | None] = {}
    for node in ssn.nodes:
        got = fit(ssn, task, node)
        out[node.name] = reason_code(got) if isinstance(got, str) else None
    return out


def compare_filter(doc: dict[str, Any], got: dict[str, str | None]) -> list[str]:
    """Differences between ``expect.filter`` ({node: reason code, a list of acceptable codes, or null})
    and the verdicts."""
    diffs = []
    for node, want in doc.get("expect", {}).get("filter", {}).items():
        if node not in got:
            diffs.append(f"node {node}: not in the cluster")
        elif isinstance(want, list):
            if got[node] not in want:
                diffs.append(f"node {node}: filter {got[node] or 'passes'}, expected one of {want}")
        elif got[node] != want:
            diffs.append(f"node {node}: filter {got[node] or 'passes'}, expected {want or 'passes'}")
    return diffs


def compare_volumes(doc: dict[str, Any]) -> list[str]:
    """Differences between ``expect.volumes`` ({node: {claim: volume, "" = provisioned}}) and the volume
    each WaitForFirstConsumer claim of ``run.task`` would bind to on that node."""
    want = doc.get("expect", {}).get("volumes")
    if not want:
        return []
    from scheduler.engine.predicates.volumes import bindings

    state, config = load_state(doc)
    ssn = open_session(state, config, NOW_MS)
    task = next(t for t in ssn.tasks if t.pod.name == doc["run"]["task"])
    nodes = {n.name: n for n in ssn.nodes}
    diffs = []
    for name, claims in want.items():
        got = bindings(task.pod.volumes, nodes[name]) if name in nodes else None
        if got != claims:
            diffs.append(f"node {name}: volumes {got}, expected {claims}")
    return diffs


def run_doc(doc: dict[str, Any]) -> tuple[list[str], ClusterState]:
    """Run one cluster scenario; returns (differences, final state)."""
    run = doc["run"]
    state, config = load_state(doc)
    if run["mode"] == "filter":
        return compare_filter(doc, filter_verdicts(doc)) + compare_volumes(doc), state
    if run["mode"] == "single_pass":
        ssn = run_actions(open_session(state, config, NOW_MS), (PHASES[run["phase"]],))
        out = result_state(ssn)
        return compare(doc, out, ssn), out
    phases = tuple(PHASES[p] for p in run["phases"])
    step = int(run.get("seconds_between_cycles", 1) * 1000)
    now = NOW_MS
    for _ in range(run["cycles"]):
        ssn = run_actions(open_session(state, config, now), phases)
        state = settle(result_state(ssn))
        now += step
    diffs = [f"after {run['cycles']} cycle(s): {d}" for d in compare(doc, state, None)]
    for i in range(run.get("confirm_cycles", 0)):
        ssn = run_actions(open_session(state, config, now), phases)
        out = result_state(ssn)
        diffs += [f"confirm cycle {i + 1}: {d}" for d in compare(doc, out, ssn)]
        state = settle(out)
        now += step
        if diffs:
            break
    return diffs, state


def run_file(path: Path) -> ScenarioResult:
    """Run one scenario file of any mode."""
    doc = json.loads(path.read_text())
    res = ScenarioResult(str(path), doc.get("name", path.stem), bool(doc.get("strict", True)))
    try:
        if doc["run"]["mode"] == "fair_share":
            from scheduler.conformance.fairshare import check_fair_share_scenario

            res.diffs = check_fair_share_scenario(doc)
        elif "refused" in doc.get("expect", {}):
            res.diffs = _check_refused(doc, str(doc["expect"]["refused"]))
        else:
            res.diffs, _ = run_doc(doc)
    except Exception as e:  # a broken scenario must be reported, not abort the whole run
        res.error = f"{type(e).__name__}: {e}"
    return res


def _check_refused(doc: dict[str, Any], field: str) -> list[str]:
    """``expect.refused``: the event contract must refuse the scenario's input, naming `field` (what a
    dead letter would say), where the reference scheduler rejects the pod at run time."""
    from pydantic import ValidationError

    try:
        load_state(doc)
    except ValidationError as e:
        where = [".".join(str(p) for p in err["loc"]) for err in e.errors()]
        if any(field in w for w in where):
            return []
        return [f"refused, but for {where}, not {field}"]
    return [f"accepted; the contract should have refused {field}"]


def scenario_files(root: Path) -> Iterator[Path]:
    """Every scenario file under `root`, any depth, in a stable order."""
    yield from sorted(p for p in root.rglob("*.json") if p.is_file())
