"""VolumeRestrictions and NodeVolumeLimits against a reference transcribed from kube-scheduler v1.36.3's Go
code (``volumerestrictions/volume_restrictions.go``: ``isVolumeConflict``, ``haveOverlap``,
``IsPVCUsedByPods``; ``nodevolumelimits/csi.go``: ``CSILimits.Filter``, ``getVolumeUniqueName``,
``getNodeVolumeAttachmentInfo``, ``checkAttachableInlineVolume``), on random
pods, claims and nodes (inline in-tree disks included, with the CSI volume CSI migration translates them to,
or none when their migration is not counted): the engine's verdict on every node equals the reference's, with the pods on the nodes
as our running tasks or as pods of another scheduler."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.conformance.runner import filter_verdicts

NODES = ("n1", "n2")
DISK_KINDS = ("gce_pd", "aws_ebs", "rbd", "iscsi", "azure_disk", "cinder")

disk = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(DISK_KINDS),
        "name": st.sampled_from(("a", "b")),
        "read_only": st.booleans(),
        "pool": st.sampled_from(("p", "q")),
        "monitors": st.lists(st.sampled_from(("m1", "m2", "m3")), max_size=2, unique=True),
        # The CSI volume ingest translated the disk to ("", "": not counted); shared with the claims' so
        # an inline disk and a claim of the same volume count once.
        # ("d1", ""): its translation failed.
        "attach": st.sampled_from((("", ""), ("d1", "h1"), ("d1", "h3"), ("d2", "h2"), ("d1", ""))),
    }
)
claim = st.fixed_dictionaries(
    {
        "rwop": st.booleans(),
        "driver": st.sampled_from(("", "d1", "d2")),
        "handle": st.sampled_from(("", "h1", "h2")),
    }
)
pod_shape = st.fixed_dictionaries(
    {
        "disks": st.lists(disk, max_size=2),
        "claims": st.lists(st.sampled_from(("c0", "c1", "c2", "c3")), max_size=3, unique=True),
    }
)
existing_pod = st.tuples(st.sampled_from(NODES), pod_shape)
attachments = st.dictionaries(
    st.sampled_from(NODES),
    st.lists(st.tuples(st.sampled_from(("d1", "d2")), st.sampled_from(("h1", "h2", "h3"))), max_size=3),
)
limits = st.dictionaries(
    st.sampled_from(NODES),
    st.dictionaries(st.sampled_from(("d1", "d2")), st.one_of(st.none(), st.integers(0, 3))),
)


# --- the reference, from the Go code ---------------------------------------------------------------------


def _is_volume_conflict(v: dict[str, Any], existing: list[dict[str, Any]]) -> bool:
    """``isVolumeConflict(volume, pod)``."""
    for e in existing:
        if v["kind"] != e["kind"]:
            continue
        if v["kind"] == "gce_pd" and v["name"] == e["name"] and not (v["read_only"] and e["read_only"]):
            return True
        if v["kind"] == "aws_ebs" and v["name"] == e["name"]:
            return True
        if v["kind"] == "iscsi" and v["name"] == e["name"] and not (v["read_only"] and e["read_only"]):
            return True
        if v["kind"] == "rbd":
            overlap = bool(set(v["monitors"]) & set(e["monitors"]))
            if (
                overlap
                and v["pool"] == e["pool"]
                and v["name"] == e["name"]
                and not (v["read_only"] and e["read_only"])
            ):
                return True
    return False


def _unique(ns: str, name: str, c: dict[str, Any]) -> tuple[str, str] | None:
    """``getCSIDriverInfo`` + ``getVolumeUniqueName``: an unbound claim (no handle) is ``<random>-ns/name``."""
    if not c["driver"]:
        return None
    return (c["driver"], c["handle"] or f"RANDOM-{ns}/{name}")


def _inline(p: dict[str, Any]) -> dict[tuple[str, str], str]:
    """``checkAttachableInlineVolume``: a migrated inline volume is ``driver/handle`` of its translation."""
    return {_attach(d): _attach(d)[0] for d in p["disks"] if _attach(d)[0] and _attach(d)[1]}


def _attach(d: dict[str, Any]) -> tuple[str, str]:
    """The disk's migrated CSI volume; RBD and iSCSI do not migrate, ingest never gives them one."""
    return ("", "") if d["kind"] in ("rbd", "iscsi") else d["attach"]


def reference(
    incoming: dict[str, Any],
    pods: list[tuple[str, dict[str, Any]]],
    claims: dict[str, dict[str, Any]],
    node_limits: dict[str, dict[str, int | None]],
    vas: dict[str, list[tuple[str, str]]] | None = None,
) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    vas = vas or {}
    used = {c for _, p in pods for c in p["claims"]}  # IsPVCUsedByPods: every assigned pod's claims
    rwop_conflict = any(claims[c]["rwop"] and c in used for c in incoming["claims"])
    for node in NODES:
        here = [p for n, p in pods if n == node]
        # VolumeRestrictions.Filter: satisfyVolumeConflicts, then satisfyReadWriteOncePod.
        if any(_is_volume_conflict(v, p["disks"]) for v in incoming["disks"] for p in here):
            out[node] = "VolumeDiskConflict"
            continue
        if rwop_conflict:
            out[node] = "ReadWriteOncePodConflict"
            continue
        # CSILimits.Filter: an inline volume that does not translate is an error on a node with a CSINode
        # (kube-scheduler's whole attempt fails; per node here).
        if node in node_limits and any(_attach(d)[0] and not _attach(d)[1] for d in incoming["disks"]):
            out[node] = "CSIMigrationFailed"
            continue
        new = {k: claims[c]["driver"] for c in incoming["claims"] if (k := _unique("default", c, claims[c]))}
        new |= _inline(incoming)
        limits_here = {d: n for d, n in node_limits.get(node, {}).items() if n is not None}
        if not new or not limits_here:
            out[node] = None
            continue
        attached: dict[tuple[str, str], str] = {}
        for p in here:
            for c in p["claims"]:
                k = _unique("default", c, claims[c])
                if k:
                    attached[k] = claims[c]["driver"]
            attached |= _inline(p)
        count: dict[str, int] = {}
        for k, d in attached.items():
            new.pop(k, None)
            count[d] = count.get(d, 0) + 1
        # getNodeVolumeAttachmentInfo: attacher/handle of the node's VolumeAttachments, counted when no pod
        # there has that volume (and not taken off the new ones).
        for k2, d in {(d, h): d for d, h in vas.get(node, [])}.items():
            if k2 not in attached:
                count[d] = count.get(d, 0) + 1
        want: dict[str, int] = {}
        for d in new.values():
            want[d] = want.get(d, 0) + 1
        over = any(d in limits_here and count.get(d, 0) + n > limits_here[d] for d, n in want.items())
        out[node] = "MaxVolumeCount" if over else None
    return out


# --- the engine, through a scenario ------------------------------------------------------------------------


def _volume(name: str, c: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"claim": name}
    if c["rwop"]:
        out["read_write_once_pod"] = True
    if c["driver"]:
        out["attach_driver"] = c["driver"]
        if c["handle"]:
            out["attach_handle"] = c["handle"]
    return out


def _disk(d: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in d.items() if k != "attach"}
    if _attach(d)[0]:
        out["attach_driver"], out["attach_handle"] = _attach(d)
    return out


def _fields(p: dict[str, Any], claims: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"disks": [_disk(d) for d in p["disks"]], "volumes": [_volume(c, claims[c]) for c in p["claims"]]}


def scenario(
    incoming: dict[str, Any],
    pods: list[tuple[str, dict[str, Any]]],
    claims: dict[str, dict[str, Any]],
    node_limits: dict[str, dict[str, int | None]],
    foreign: bool,
    vas: dict[str, list[tuple[str, str]]] | None = None,
) -> dict[str, Any]:
    jobs = []
    vas = vas or {}
    cluster: dict[str, Any] = {
        "nodes": [{"name": n} for n in NODES],
        "csi_nodes": [
            {
                "name": n,
                "drivers": [{"name": d, "count": c} for d, c in sorted(ds.items())],
                "attached": [{"driver": d, "handle": h} for d, h in vas.get(n, [])],
            }
            for n, ds in sorted(node_limits.items())
        ],
    }
    if foreign:
        cluster["foreign_pods"] = [
            {"name": f"e{i}", "node": n} | _fields(p, claims) for i, (n, p) in enumerate(pods)
        ]
    else:
        for i, (n, p) in enumerate(pods):
            task = {"name": f"e{i}", "status": "running", "node": n, "cpu_millicores": 0, "memory_bytes": 0}
            jobs.append(
                {"name": f"e{i}", "queue": "q", "min_available": 1, "tasks": [task | _fields(p, claims)]}
            )
    task = {"name": "incoming", "cpu_millicores": 0, "memory_bytes": 0} | _fields(incoming, claims)
    jobs.append({"name": "incoming", "queue": "q", "min_available": 1, "tasks": [task]})
    return {
        "name": "random",
        "run": {"mode": "filter", "task": "incoming"},
        "cluster": cluster,
        "queues": [
            {"name": "q", "parent": None, "gpu": {"quota": 100, "limit": None, "over_quota_weight": 1}}
        ],
        "jobs": jobs,
    }


@settings(max_examples=300, deadline=None)
@given(
    incoming=pod_shape,
    pods=st.lists(existing_pod, max_size=4),
    claim_list=st.lists(claim, min_size=4, max_size=4),
    node_limits=limits,
    foreign=st.booleans(),
    vas=attachments,
)
def test_storage_verdicts_equal_the_go_reference(
    incoming: dict[str, Any],
    pods: list[tuple[str, dict[str, Any]]],
    claim_list: list[dict[str, Any]],
    node_limits: dict[str, dict[str, int | None]],
    foreign: bool,
    vas: dict[str, list[tuple[str, str]]],
) -> None:
    claims = {f"c{i}": c for i, c in enumerate(claim_list)}
    vas = {n: v for n, v in vas.items() if n in node_limits}  # VolumeAttachments ride on the CSINode
    got = filter_verdicts(scenario(incoming, pods, claims, node_limits, foreign, vas))
    assert got == reference(incoming, pods, claims, node_limits, vas)


def test_the_reference_and_the_engine_agree_on_a_hand_case() -> None:
    # Two unbound claims of driver d1 already on n1 (one of them twice), a limit of 2: one more new claim
    # of d1 does not fit there, but the same claim again does (counted once).
    claims = {
        "c0": {"rwop": False, "driver": "d1", "handle": ""},
        "c1": {"rwop": False, "driver": "d1", "handle": ""},
        "c2": {"rwop": False, "driver": "d1", "handle": ""},
        "c3": {"rwop": True, "driver": "", "handle": ""},
    }
    pods = [("n1", {"disks": [], "claims": ["c0"]}), ("n1", {"disks": [], "claims": ["c0", "c1"]})]
    limits_: dict[str, dict[str, int | None]] = {"n1": {"d1": 2}}
    new = {"disks": [], "claims": ["c2"]}
    again = {"disks": [], "claims": ["c1"]}
    want_new = {"n1": "MaxVolumeCount", "n2": None}
    assert reference(new, pods, claims, limits_) == want_new
    assert filter_verdicts(scenario(new, pods, claims, limits_, False)) == want_new
    assert filter_verdicts(scenario(again, pods, claims, limits_, True)) == {"n1": None, "n2": None}
