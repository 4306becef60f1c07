"""Writes the kube-scheduler storage conformance scenarios beyond binding and zones
(scheduler/conformance/scenarios/kube-scheduler/volumerestrictions/, nodevolumelimits/,
volumebinding-capacity/).

Each case is translated by hand from a table test of k8s.io/kubernetes v1.36.3
(``pkg/scheduler/framework/plugins/volumerestrictions/volume_restrictions_test.go``,
``nodevolumelimits/csi_test.go``, ``volumebinding/binder_test.go``) in the ``filter`` mode of
scheduler/conformance/scenarios/kube-scheduler/SCHEMA.md. As in ``tools/kube_scheduler_volume_scenarios.py``,
the Go tests state PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSIDrivers and
CSIStorageCapacities, and a scenario holds what ingest makes of them: every claim (of the incoming pod and
of the pods already on the node) is resolved here by ingest's own code (:func:`ingest.kube.volumes.claim`,
:func:`ingest.kube.volumes.storage_fields`, :func:`ingest.kube.volumes.is_for_pod`) and inline disks by
:func:`ingest.kube.translate.inline_disks`, so a scenario checks ingest's reading together with the
engine's filter. Pods already on the node are running tasks of their own jobs; the VolumeRestrictions
cases are also written with them as pods of another scheduler (``cluster.foreign_pods``).

The files are data, checked in; re-run ``PYTHONPATH=. python3 tools/kube_scheduler_storage_scenarios.py``
after editing a table.
"""

from __future__ import annotations

import copy
from typing import Any

from kube_scheduler_scenarios import one_queue
from kube_scheduler_volume_scenarios import CASES, PLUGINS, VERSION, write

from ingest.events import VolumeClaim
from ingest.kube.translate import inline_disks
from ingest.kube.volumes import claim as resolve_claim
from ingest.kube.volumes import is_for_pod, storage_fields

Doc = dict[str, Any]

# --- objects ---------------------------------------------------------------------------------------------


class World:
    """The API objects of one Go test: claims by (namespace, name), volumes, classes, CSIDrivers,
    CSIStorageCapacities."""

    def __init__(self) -> None:
        self.pvcs: dict[tuple[str, str], Doc] = {}
        self.pvs: dict[str, Doc] = {}
        self.classes: dict[str, Doc] = {}
        self.drivers: dict[str, Doc] = {}
        self.capacities: list[Doc] = []

    def claim(
        self,
        name: str,
        ns: str = "default",
        cls: str | None = None,
        volume: str = "",
        modes: list[str] | None = None,
        size: str | None = None,
        owner_uid: str | None = None,
    ) -> None:
        spec: Doc = {"volumeMode": "Filesystem"}
        if cls is not None:
            spec["storageClassName"] = cls
        if volume:
            spec["volumeName"] = volume
        if modes:
            spec["accessModes"] = modes
        if size is not None:
            spec["resources"] = {"requests": {"storage": size}}
        meta: Doc = {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}"}
        if volume:
            meta["annotations"] = {"pv.kubernetes.io/bind-completed": "yes"}
        if owner_uid is not None:
            meta["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Pod", "name": "owner", "uid": owner_uid, "controller": True}
            ]
        self.pvcs[(ns, name)] = {"metadata": meta, "spec": spec}

    def volume(self, name: str, source: Doc, cls: str = "") -> None:
        spec: Doc = {"storageClassName": cls, "volumeMode": "Filesystem", "capacity": {"storage": "1Gi"}}
        spec.update(source)
        self.pvs[name] = {"metadata": {"name": name}, "spec": spec, "status": {"phase": "Bound"}}

    def resolve(self, ns: str, name: str, pod: Doc | None = None, ephemeral: bool = False) -> Doc:
        """The claim as ingest resolves it for a pod (``pod``: for a generic ephemeral volume's claim)."""
        pvc = self.pvcs.get((ns, name))
        if ephemeral and pvc is None:
            out: Doc = {"claim": name, "bound": False, "ephemeral": True, "missing": True}
        elif ephemeral and pod is not None and pvc is not None and not is_for_pod(pod, pvc):
            out = {"claim": name, "bound": False, "ephemeral": True, "not_owned": True}
        else:
            spec = (pvc or {}).get("spec", {})
            pv = self.pvs.get(spec.get("volumeName") or "")
            cls_name = spec.get("storageClassName") or ""
            sc = self.classes.get(cls_name) if pvc is not None else None
            if sc is not None:
                sc = {"metadata": {"name": cls_name}, **sc}
            resolved = resolve_claim(name, pvc, pv, sc, list(self.pvs.values()))
            driver = self.drivers.get(str((sc or {}).get("provisioner") or ""))
            out = resolved | storage_fields(pvc, pv, sc, driver, self.capacities, resolved)
            if ephemeral:
                out["ephemeral"] = True
        return VolumeClaim.model_validate(out).model_dump(mode="json", exclude_defaults=True) | {
            "claim": name
        }


def pod(
    w: World,
    name: str = "",
    ns: str = "default",
    uid: str = "",
    claims: list[str] | None = None,
    ephemeral: list[str] | None = None,
    volumes: list[Doc] | None = None,
) -> Doc:
    """A pod's filter fields: resolved claims (``claims``: persistentVolumeClaim volumes; ``ephemeral``:
    generic ephemeral volumes, claim ``<pod>-<volume>``) and inline disks (``volumes``: Pod volume
    sources)."""
    obj = {
        "metadata": {"name": name or "pod", "namespace": ns, "uid": uid},
        "spec": {"volumes": volumes or []},
    }
    out: Doc = {"namespace": ns}
    vols = [w.resolve(ns, c) for c in claims or []]
    vols += [w.resolve(ns, f"{name}-{v}", obj, ephemeral=True) for v in ephemeral or []]
    if vols:
        out["volumes"] = vols
    disks = [d.model_dump(mode="json", exclude_defaults=True) for d in inline_disks("scenario", obj["spec"])]
    if disks:
        out["disks"] = disks
    return out


def case(
    plugin: str,
    file: str,
    test: str,
    name: str,
    incoming: Doc,
    existing: list[Doc],
    expect: str | None,
    *,
    csi_node: list[Doc] | None = None,
    attached: list[Doc] | None = None,
    foreign: bool = False,
    node_labels: dict[str, str] | None = None,
    note: str | None = None,
    folder: str | None = None,
) -> None:
    """One scenario on one node ``node``: ``existing`` pods run there (as our running tasks, or with
    ``foreign`` as pods of another scheduler); ``csi_node`` its CSINode drivers (None: no CSINode)."""
    source: Doc = {"repository": VERSION, "file": f"{PLUGINS}/{plugin}/{file}", "test": test, "case": name}
    if note:
        source["note"] = note
    cluster: Doc = {"nodes": [{"name": "node", "labels": node_labels or {}}]}
    if csi_node is not None:
        cluster["csi_nodes"] = [
            {"name": "node", "drivers": csi_node} | ({"attached": attached} if attached else {})
        ]
    jobs: list[Doc] = []
    if foreign:
        cluster["foreign_pods"] = [
            {"name": f"existing-{i}", "node": "node"} | copy.deepcopy(p) for i, p in enumerate(existing)
        ]
    else:
        for i, p in enumerate(existing):
            task = {
                "name": f"existing-{i}",
                "status": "running",
                "node": "node",
                "cpu_millicores": 0,
                "memory_bytes": 0,
            } | copy.deepcopy(p)
            jobs.append(
                {"name": f"existing-{i}", "queue": "q", "priority": 50, "min_available": 1, "tasks": [task]}
            )
    task = {"name": "incoming", "cpu_millicores": 0, "memory_bytes": 0} | copy.deepcopy(incoming)
    jobs.append({"name": "incoming", "queue": "q", "priority": 50, "min_available": 1, "tasks": [task]})
    title = f"{name} (pods of another scheduler)" if foreign else name
    doc: Doc = {
        "name": title,
        "source": source,
        "strict": True,
        "run": {"mode": "filter", "task": "incoming"},
        "cluster": cluster,
        "queues": one_queue(),
        "jobs": jobs,
        "expect": {"filter": {"node": expect}},
    }
    CASES.append((folder or plugin, doc))


# --- volumerestrictions/volume_restrictions_test.go ------------------------------------------------------

DISK = "VolumeDiskConflict"
RWOP = "ReadWriteOncePodConflict"


def _restrictions() -> None:
    f = "volume_restrictions_test.go"
    w = World()
    sources = {
        "TestGCEDiskConflicts": (
            {"gcePersistentDisk": {"pdName": "foo"}},
            {"gcePersistentDisk": {"pdName": "bar"}},
        ),
        "TestAWSDiskConflicts": (
            {"awsElasticBlockStore": {"volumeID": "foo"}},
            {"awsElasticBlockStore": {"volumeID": "bar"}},
        ),
        "TestRBDDiskConflicts": (
            {"rbd": {"monitors": ["a", "b"], "pool": "foo", "image": "bar", "fsType": "ext4"}},
            {"rbd": {"monitors": ["c", "d"], "pool": "foo", "image": "bar", "fsType": "ext4"}},
        ),
        "TestISCSIDiskConflicts": (
            {
                "iscsi": {
                    "targetPortal": "127.0.0.1:3260",
                    "iqn": "iqn.2016-12.server:storage.target01",
                    "fsType": "ext4",
                    "lun": 0,
                }
            },
            {
                "iscsi": {
                    "targetPortal": "127.0.0.1:3260",
                    "iqn": "iqn.2017-12.server:storage.target01",
                    "fsType": "ext4",
                    "lun": 0,
                }
            },
        ),
    }
    for test, (state, state2) in sources.items():
        vol, vol2 = [{"name": "v"} | state], [{"name": "v"} | state2]
        rows: list[tuple[str, list[Doc], list[list[Doc]], str | None]] = [
            ("nothing", [], [], None),
            ("one state", [], [vol], None),
            ("same state", vol, [vol], DISK),
            ("different state", vol2, [vol], None),
        ]
        if test == "TestGCEDiskConflicts":
            rows.append(
                (
                    "pod with a volume that doesn't have restrictions",
                    [{"name": "volume with no restriction"}],
                    [],
                    None,
                )
            )
        for foreign in (False, True):
            for name, incoming, existing, want in rows:
                case(
                    "volumerestrictions",
                    f,
                    test,
                    name,
                    pod(w, volumes=incoming),
                    [pod(w, volumes=v) for v in existing],
                    want,
                    foreign=foreign,
                )

    # TestAccessModeConflicts: the claims state only their access modes. Here each is bound to a volume,
    # so the default chain's VolumeBinding lets them through (an unbound claim of no class is refused there).
    w = World()
    for c, mode in (
        ("claim-with-rwop-1", "ReadWriteOncePod"),
        ("claim-with-rwop-2", "ReadWriteOncePod"),
        ("claim-with-rwx", "ReadWriteMany"),
    ):
        w.claim(c, volume=f"pv-{c}", modes=[mode])
        w.volume(f"pv-{c}", {"csi": {"driver": "csi.example.com", "volumeHandle": c}})
    bound_note = (
        "the Go test's claims state only their access modes; here each is bound to a volume so that the "
        "default chain's VolumeBinding passes"
    )
    one = ["claim-with-rwop-1"]
    two = ["claim-with-rwop-1", "claim-with-rwop-2"]
    rwx = ["claim-with-rwx"]
    rows2: list[tuple[str, list[str], list[list[str]], str | None, str | None]] = [
        ("nothing", [], [], None, None),
        (
            "failed to get PVC",
            one,
            [],
            "VolumeUnboundImmediate",
            'kube-scheduler\'s PreFilter refuses the pod (persistentvolumeclaim "claim-with-rwop-1" not found, '
            "UnschedulableAndUnresolvable); ingest holds a missing claim as an unbound Immediate one, refused on "
            "every node",
        ),
        ("no access mode conflict", one, [rwx], None, bound_note),
        ("access mode conflict, unschedulable", one, [one, rwx], RWOP, bound_note),
        ("two conflicts, unschedulable", two, [two, rwx], RWOP, bound_note),
    ]
    empty = World()
    for foreign in (False, True):
        for name, incoming, existing, want, note in rows2:
            world = empty if name == "failed to get PVC" else w
            case(
                "volumerestrictions",
                f,
                "TestAccessModeConflicts",
                name,
                pod(world, claims=incoming),
                [pod(world, claims=c) for c in existing],
                want,
                foreign=foreign,
                note=note,
            )


# --- nodevolumelimits/csi_test.go TestCSILimits ----------------------------------------------------------

EBS = "ebs.csi.aws.com"
GCE = "pd.csi.storage.gke.io"
AWS_INTREE = "kubernetes.io/aws-ebs"
HOSTPATH = "kubernetes.io/hostpath"
SC = "csi-sc"
MAX = "MaxVolumeCount"


def _limits_world(drivers: list[str]) -> World:
    """getFakeCSIPVLister / getFakeCSIPVCLister / getFakeCSIStorageClassLister for these drivers."""
    w = World()
    for ns in ("default", "test"):
        for d in drivers:
            for j in range(4):
                v = _name(d, j)
                if d == AWS_INTREE:
                    source: Doc = {"awsElasticBlockStore": {"volumeID": v}}
                elif d == HOSTPATH:
                    source = {"hostPath": {"path": "/tmp"}}
                else:
                    source = {"csi": {"driver": d, "volumeHandle": v}}
                w.volume(v, source)
                w.claim(v, ns, volume=v)
        w.claim("csi-4", ns, cls=SC)
        w.claim("csi-5", ns)
        w.claim("csi-6", ns, cls=SC, volume="missing-in-action")
    # The Go lister's class states only its provisioner: see the notes on the cases with unbound claims.
    w.classes[SC] = {"provisioner": drivers[0], "volumeBindingMode": "WaitForFirstConsumer"}
    return w


def _name(driver: str, j: int) -> str:
    """The Go lister's claim / volume name ``csi-<driver>-<j>``, with ``/`` written ``-`` (a name)."""
    return f"csi-{driver.replace('/', '-')}-{j}"


def _csi_node(source: str, limit: int, drivers: list[str]) -> list[Doc] | None:
    if source == "csinode":
        return [{"name": d, "count": limit} for d in drivers]
    if source == "csinode-with-no-limit":
        return [{"name": d} for d in drivers]
    return None


def _limits() -> None:
    f, t = "csi_test.go", "TestCSILimits"
    ebs_pvc = lambda *js: [f"csi-{EBS}-{j}" for j in js]  # noqa: E731
    gce_two = [f"csi-{GCE}-1", f"csi-{GCE}-2"]
    wffc = (
        "the Go test's StorageClass states only its provisioner; here it is WaitForFirstConsumer so that the "
        "default chain's VolumeBinding admits the incoming pod's unbound claim (an Immediate one would be refused "
        "there before any volume is counted)"
    )
    # (name, incoming claims, existing pods' claims, maxVols, drivers, limitSource, want, note)
    rows: list[tuple[str, list[str], list[list[str]], int, list[str], str, str | None, str | None]] = [
        (
            "fits when node volume limit >= new pods CSI volume",
            ebs_pvc(0),
            [ebs_pvc(3), ebs_pvc(1, 2)],
            4,
            [EBS],
            "csinode",
            None,
            None,
        ),
        (
            "doesn't when node volume limit <= pods CSI volume",
            ebs_pvc(0),
            [ebs_pvc(3), ebs_pvc(1, 2)],
            2,
            [EBS],
            "csinode",
            MAX,
            None,
        ),
        (
            "should when driver does not support volume limits",
            ebs_pvc(0),
            [ebs_pvc(3), ebs_pvc(1, 2)],
            2,
            [EBS],
            "csinode-with-no-limit",
            None,
            None,
        ),
        (
            "count pending PVCs towards volume limit <= pods CSI volume",
            ebs_pvc(0),
            [["csi-4"], ebs_pvc(1, 2)],
            2,
            [EBS],
            "csinode",
            MAX,
            None,
        ),
        (
            "count multiple pending pvcs towards volume limit >= pods CSI volume",
            ebs_pvc(0),
            [["csi-4"], ["csi-4"], ebs_pvc(1, 2)],
            4,
            [EBS],
            "csinode",
            None,
            None,
        ),
        (
            "should count PVCs with invalid PV name but valid SC",
            ebs_pvc(0),
            [["csi-6"], ebs_pvc(1, 2)],
            2,
            [EBS],
            "csinode",
            MAX,
            None,
        ),
        (
            "don't count pvcs with missing SC towards volume limit",
            ebs_pvc(0),
            [ebs_pvc(3), ["csi-5"]],
            2,
            [EBS],
            "csinode",
            None,
            None,
        ),
        (
            "count pvcs with the same type towards volume limit",
            ebs_pvc(0),
            [gce_two, ebs_pvc(1, 2)],
            2,
            [EBS, GCE],
            "csinode",
            MAX,
            None,
        ),
        (
            "don't count pvcs with different type towards volume limit",
            gce_two,
            [ebs_pvc(1, 2), ebs_pvc(3)],
            2,
            [EBS, GCE],
            "csinode",
            None,
            None,
        ),
        (
            "should not limit pod if volume used does not report limits",
            [_name(AWS_INTREE, 0)],
            [[_name(AWS_INTREE, 1), _name(AWS_INTREE, 2)]],
            2,
            [AWS_INTREE, EBS],
            "csinode-with-no-limit",
            None,
            None,
        ),
        (
            "should not count non-migratable in-tree volumes",
            [_name(HOSTPATH, 0)],
            [ebs_pvc(1, 2)],
            2,
            [HOSTPATH, EBS],
            "csinode",
            None,
            None,
        ),
        ("don't skip Filter when the pod has pvcs", ebs_pvc(0), [], 2, [EBS], "csinode", None, None),
    ]
    # VolumeAttachments (buildFakeClientWithVALister): va-<driver>-<j> attaches volume csi-<driver>-<j> to
    # the node; ingest carries them on the node's CSINode as (attacher, the volume's CSI handle).
    for name, count, want in (
        ("should count VolumeAttachments towards volume limit when no pods exist", 2, MAX),
        ("should schedule pod when VolumeAttachments count does not exceed limit", 1, None),
    ):
        w = _limits_world([EBS])
        case(
            "nodevolumelimits",
            f,
            t,
            name,
            pod(w, claims=ebs_pvc(0)),
            [],
            want,
            csi_node=_csi_node("csinode", 2, [EBS]),
            attached=[{"driver": EBS, "handle": _name(EBS, j)} for j in range(count)],
        )
    for name, incoming, existing, limit, drivers, source, want, note in rows:
        w = _limits_world(drivers)
        case(
            "nodevolumelimits",
            f,
            t,
            name,
            pod(w, claims=incoming),
            [pod(w, claims=c) for c in existing],
            want,
            csi_node=_csi_node(source, limit, drivers),
            note=note,
        )
    # "nil csi node": an inline in-tree EBS volume, no CSINode at all.
    w = _limits_world([AWS_INTREE, EBS])
    case(
        "nodevolumelimits",
        f,
        t,
        "nil csi node",
        pod(w, volumes=[{"name": "v", "awsElasticBlockStore": {"volumeID": "aws-inline1"}}]),
        [pod(w, claims=[_name(AWS_INTREE, 1), _name(AWS_INTREE, 2)])],
        None,
        csi_node=None,
    )

    # Ephemeral volumes: pod abc in namespace test (uid 12345), volume xyz -> claim abc-xyz owned by it.
    def eph(owner: str | None) -> World:
        w = _limits_world([EBS])
        if owner is not None:
            w.claim("abc-xyz", "test", cls=SC, owner_uid=owner)
        return w

    def eph_pod(w: World) -> Doc:
        return pod(w, "abc", "test", "12345", ephemeral=["xyz"])

    def eph_two(w: World) -> Doc:
        w.claim("abc-x", "test", cls=SC, owner_uid="12345II")
        w.claim("abc-y", "test", cls=SC, owner_uid="12345II")
        return pod(w, "abc", "test", "12345II", ephemeral=["x", "y"])

    w = eph(None)
    case(
        "nodevolumelimits",
        f,
        t,
        "ephemeral volume missing",
        eph_pod(w),
        [],
        "EphemeralClaimMissing",
        csi_node=_csi_node("csinode-with-no-limit", 0, [EBS]),
        note="kube-scheduler: UnschedulableAndUnresolvable, looking up PVC test/abc-xyz: not found",
    )
    w = _limits_world([EBS])
    w.claim("abc-xyz", "test", cls=SC)
    case(
        "nodevolumelimits",
        f,
        t,
        "ephemeral volume not owned",
        eph_pod(w),
        [],
        "EphemeralClaimNotOwned",
        csi_node=_csi_node("csinode-with-no-limit", 0, [EBS]),
        note="kube-scheduler: an error status, PVC test/abc-xyz was not created for pod test/abc (pod is not owner)",
    )
    w = eph("12345")
    case(
        "nodevolumelimits",
        f,
        t,
        "ephemeral volume unbound",
        eph_pod(w),
        [],
        None,
        csi_node=_csi_node("csinode-with-no-limit", 0, [EBS]),
        note=wffc,
    )
    w = eph("12345")
    case(
        "nodevolumelimits",
        f,
        t,
        "ephemeral doesn't when node volume limit <= pods CSI volume",
        eph_pod(w),
        [pod(w, claims=ebs_pvc(3)), pod(w, claims=ebs_pvc(1, 2))],
        MAX,
        csi_node=_csi_node("csinode", 2, [EBS]),
        note=wffc,
    )
    w = eph("12345")
    case(
        "nodevolumelimits",
        f,
        t,
        "ephemeral doesn't when node volume limit <= pods ephemeral CSI volume",
        pod(w, claims=ebs_pvc(0)),
        [pod(w, claims=ebs_pvc(3)), eph_two(w)],
        MAX,
        csi_node=_csi_node("csinode", 2, [EBS]),
    )
    for name, limit, want in (
        (
            "persistent doesn't when node volume limit <= pods ephemeral CSI volume + persistent volume, ephemeral disabled",
            3,
            MAX,
        ),
        (
            "persistent doesn't when node volume limit <= pods ephemeral CSI volume + persistent volume",
            3,
            MAX,
        ),
        ("persistent okay when node volume limit > pods ephemeral CSI volume + persistent volume", 5, None),
    ):
        w = eph("12345")
        case(
            "nodevolumelimits",
            f,
            t,
            name,
            pod(w, claims=ebs_pvc(0)),
            [pod(w, claims=ebs_pvc(3)), eph_pod(w), pod(w, claims=ebs_pvc(1, 2))],
            want,
            csi_node=_csi_node("csinode", limit, [EBS]),
            note="the generic ephemeral volume feature is GA: the Go case's ephemeralEnabled flag is not read"
            if "disabled" in name
            else None,
        )
    w = _limits_world([EBS])
    cm = [{"name": "cm", "configMap": {"name": "x"}}, {"name": "s", "secret": {"secretName": "x"}}]
    case(
        "nodevolumelimits",
        f,
        t,
        "skip Filter when the pod only uses secrets and configmaps",
        pod(w, volumes=cm),
        [],
        None,
        csi_node=_csi_node("csinode", 2, [EBS]),
    )
    w = eph(None)
    case(
        "nodevolumelimits",
        f,
        t,
        "don't skip Filter when the pod has ephemeral volumes",
        pod(w, "abc", "test", "", ephemeral=["xyz"], volumes=cm),
        [],
        "EphemeralClaimMissing",
        csi_node=_csi_node("csinode-with-no-limit", 0, [EBS]),
        note="kube-scheduler: UnschedulableAndUnresolvable, looking up PVC test/abc-xyz: not found",
    )
    # In-tree volume migration and mixed volumes: an in-tree EBS volume (a claim's, an unbound claim of the
    # in-tree provisioner, or inline) counts as the ebs.csi.aws.com volume CSI migration translates it to.
    intree = [AWS_INTREE, EBS]
    in_one, in_two = [_name(AWS_INTREE, 0)], [_name(AWS_INTREE, 1), _name(AWS_INTREE, 2)]
    inline = [{"name": "v", "awsElasticBlockStore": {"volumeID": "aws-inline1"}}]
    same_id = [{"name": "v", "awsElasticBlockStore": {"volumeID": _name(EBS, 1)}}]
    with_cm = [{"name": "cm", "configMap": {"name": "cm"}}, {"name": "s", "secret": {"secretName": "s"}}]
    # (name, incoming claims, incoming inline volumes, existing pods' claims, maxVols, want)
    migration: list[tuple[str, list[str], list[Doc], list[list[str]], int, str | None]] = [
        ("should count in-tree volumes if migration is enabled", in_one, [], [in_two], 2, MAX),
        ("should count unbound in-tree volumes if migration is enabled", ["csi-4"], [], [in_two], 2, MAX),
        ("should count in-tree inline volumes if migration is enabled", [], inline, [in_two], 2, MAX),
        (
            "should count in-tree and csi volumes if migration is enabled (when scheduling in-tree volumes)",
            in_one,
            [],
            [ebs_pvc(1, 2)],
            2,
            MAX,
        ),
        (
            "should count in-tree, inline and csi volumes if migration is enabled (when scheduling in-tree"
            " volumes)",
            [],
            inline,
            [ebs_pvc(1, 2), in_one],
            3,
            MAX,
        ),
        (
            "should not count in-tree, inline and csi volumes if migration is enabled (when scheduling in-tree"
            " volumes)",
            [],
            same_id,
            [ebs_pvc(1, 2), in_one],
            3,
            None,
        ),
        (
            "should count in-tree and csi volumes if migration is enabled (when scheduling csi volumes)",
            ebs_pvc(0),
            [],
            [in_two],
            2,
            MAX,
        ),
        (
            "don't skip Filter when the pod has inline migratable volumes",
            [],
            with_cm + inline,
            [in_two],
            2,
            MAX,
        ),
    ]
    for name, claims, volumes, existing_claims, limit, want in migration:
        w = _limits_world(intree)
        case(
            "nodevolumelimits",
            f,
            t,
            name,
            pod(w, claims=claims, volumes=volumes),
            [pod(w, claims=c) for c in existing_claims],
            want,
            csi_node=_csi_node("csinode", limit, intree),
        )


# --- volumebinding/binder_test.go: CSI storage capacity ----------------------------------------------------

NODE_KEY = "nodeKey"
PROVISIONER = "test-provisioner"
WAIT_PROV = "waitClassWithProvisioner"
WAIT = "waitClass"


def _capacity_obj(cls: str, node: str | None, capacity: str, maximum: str) -> Doc:
    """binder_test.go's makeCapacity."""
    c: Doc = {"metadata": {"name": "net"}, "storageClassName": cls, "nodeTopology": {}}
    if node is not None:
        c["nodeTopology"] = {"matchLabels": {NODE_KEY: node}}
    if capacity:
        c["capacity"] = capacity
    if maximum:
        c["maximumVolumeSize"] = maximum
    return c


def _capacity() -> None:
    f, folder = "binder_test.go", "volumebinding-capacity"
    node1 = {NODE_KEY: "node1"}
    net = _capacity_obj(WAIT_PROV, None, "1Gi", "")
    n1 = _capacity_obj(WAIT_PROV, "node1", "1Gi", "")
    n2 = _capacity_obj(WAIT_PROV, "node2", "1Gi", "")
    space = "VolumeNotEnoughSpace"
    rows: list[tuple[str, list[Doc], str | None]] = [
        ("network-attached", [net], None),
        ("local-storage", [n1], None),
        ("multiple", [net, n2, n1], None),
        ("no-storage", [], space),
        ("wrong-node", [_capacity_obj(WAIT_PROV, "node2", "1Gi", "")], space),
        ("wrong-storage-class", [_capacity_obj(WAIT, "node1", "1Gi", "")], space),
        ("insufficient-storage", [_capacity_obj(WAIT_PROV, "node1", "1Mi", "")], space),
        ("insufficient-volume-size", [_capacity_obj(WAIT_PROV, "node1", "1Gi", "1Mi")], space),
        ("zero-storage", [_capacity_obj(WAIT_PROV, "node1", "0Mi", "")], space),
        ("zero-volume-size", [_capacity_obj(WAIT_PROV, "node1", "", "0Mi")], space),
        ("nil-storage", [_capacity_obj(WAIT_PROV, "node1", "", "")], space),
    ]
    for opt_in in (True, False):
        for name, caps, want in rows:
            w = World()
            w.classes[WAIT_PROV] = {
                "volumeBindingMode": "WaitForFirstConsumer",
                "provisioner": PROVISIONER,
                "allowedTopologies": [
                    {"matchLabelExpressions": [{"key": NODE_KEY, "values": ["node1", "reference-value"]}]}
                ],
            }
            w.drivers[PROVISIONER] = {"metadata": {"name": PROVISIONER}, "spec": {"storageCapacity": opt_in}}
            w.capacities = caps
            w.claim("provisioned-pvc", "testns", cls=WAIT_PROV, size="1Gi")
            case(
                "volumebinding",
                f,
                "TestCapacity",
                f"CSIDriver.StorageCapacity={str(opt_in).lower()}/{name}",
                pod(w, ns="testns", claims=["provisioned-pvc"]),
                [],
                want if opt_in else None,
                node_labels=node1,
                folder=folder,
            )

    # TestFindPodVolumesWithProvisioning under "CSIDriver with / without capacity tracking" (no
    # CSIStorageCapacity objects): a claim to provision needs capacity only when the driver tracks it.
    for tracking in (True, False):
        for name, claims, vols, want in (
            ("one-provisioned", ["provisioned-pvc"], [], space),
            (
                "two-unbound-pvcs,one-matched,one-provisioned",
                ["unbound-pvc", "provisioned-pvc"],
                ["pv-node1a"],
                space,
            ),
            ("one-bound,one-provisioned", ["bound-pvc", "provisioned-pvc"], ["pv-bound"], space),
            ("invalid-provisioner", ["no-provisioner-pvc"], [], "VolumeBindConflict"),
            ("volume-topology-unsatisfied", ["topo-mismatch-pvc"], [], "VolumeBindConflict"),
        ):
            w = _provisioning_world(tracking, vols)
            label = "CSIDriver with capacity tracking" if tracking else "CSIDriver without capacity tracking"
            case(
                "volumebinding",
                f,
                "TestFindPodVolumesWithProvisioning",
                f"{label}/{name}",
                pod(w, ns="testns", claims=claims),
                [],
                want if (tracking or want != space) else None,
                node_labels=node1,
                folder=folder,
                note="needsCapacity: without CSIStorageCapacity objects, provisioning is blocked"
                if want == space and tracking
                else None,
            )


def _provisioning_world(tracking: bool, volumes: list[str]) -> World:
    """The classes and claims of binder_test.go the provisioning cases use, and the case's ``volumes``."""
    w = World()
    w.classes[WAIT_PROV] = {
        "volumeBindingMode": "WaitForFirstConsumer",
        "provisioner": PROVISIONER,
        "allowedTopologies": [
            {"matchLabelExpressions": [{"key": NODE_KEY, "values": ["node1", "reference-value"]}]}
        ],
    }
    w.classes[WAIT] = {
        "volumeBindingMode": "WaitForFirstConsumer",
        "provisioner": "kubernetes.io/no-provisioner",
    }
    w.classes["topoMismatchClass"] = {
        "volumeBindingMode": "WaitForFirstConsumer",
        "provisioner": PROVISIONER,
        "allowedTopologies": [{"matchLabelExpressions": [{"key": NODE_KEY, "values": ["reference-value"]}]}],
    }
    w.drivers[PROVISIONER] = {"metadata": {"name": PROVISIONER}, "spec": {"storageCapacity": tracking}}
    w.claim("provisioned-pvc", "testns", cls=WAIT_PROV, size="1Gi")
    w.claim("no-provisioner-pvc", "testns", cls=WAIT, size="1Gi")
    w.claim("topo-mismatch-pvc", "testns", cls="topoMismatchClass", size="1Gi")
    w.claim("unbound-pvc", "testns", cls=WAIT, size="1G")
    w.claim("bound-pvc", "testns", cls=WAIT, size="1G", volume="pv-bound")
    aff = {
        "nodeAffinity": {
            "required": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": NODE_KEY, "operator": "In", "values": ["node1"]}]}
                ]
            }
        }
    }
    w.volume("pv-bound", aff, cls=WAIT)
    w.pvs["pv-node1a"] = {
        "metadata": {"name": "pv-node1a"},
        "spec": {"storageClassName": WAIT, "volumeMode": "Filesystem", "capacity": {"storage": "5G"}} | aff,
        "status": {"phase": "Available"},
    }
    w.pvs = {k: v for k, v in w.pvs.items() if k in volumes}
    return w


def main() -> None:
    """Build every table and write the files (only these plugins' folders are rewritten)."""
    _restrictions()
    _limits()
    _capacity()
    print(f"wrote {write()} scenarios")


if __name__ == "__main__":
    main()
