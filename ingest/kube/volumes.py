"""PersistentVolumeClaims as kube-scheduler's volume plugins read them (VolumeBinding, VolumeZone).

Ingest resolves a pod's claims once, when it submits the pod: a bound claim gives its volume's node
affinity and zone / region labels; an unbound ``WaitForFirstConsumer`` claim gives the available volumes
it could bind to — every check of ``FindMatchingVolume`` (component-helpers ``pv_helpers.go``) that does
not depend on the node: class, pre-binding, capacity, volume mode, deletion, phase, the claim's selector,
volume attributes class and access modes — and whether its StorageClass can provision one, and where. The
engine then weighs, per node, only what depends on the node. The binder repeats the choice against the
API objects before binding (``choose``), as kube-scheduler's PreBind does.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any, Final

from ingest.kube.units import parse_quantity

ANNOTATION_SELECTED_NODE: Final = "volume.kubernetes.io/selected-node"
ANNOTATION_BOUND_BY_CONTROLLER: Final = "pv.kubernetes.io/bound-by-controller"
ANNOTATION_BIND_COMPLETED: Final = "pv.kubernetes.io/bind-completed"
ANNOTATION_BETA_STORAGE_CLASS: Final = "volume.beta.kubernetes.io/storage-class"
NO_PROVISIONER: Final = "kubernetes.io/no-provisioner"
ZONE_KEYS: Final = (
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _spec(obj: dict[str, Any] | None) -> dict[str, Any]:
    return _dict((obj or {}).get("spec"))


def _meta(obj: dict[str, Any] | None) -> dict[str, Any]:
    return _dict((obj or {}).get("metadata"))


def claim_class(pvc: dict[str, Any]) -> str:
    """The claim's StorageClass name: the beta annotation wins, as ``GetPersistentVolumeClaimClass``."""
    ann = _dict(_meta(pvc).get("annotations"))
    if ANNOTATION_BETA_STORAGE_CLASS in ann:
        return str(ann[ANNOTATION_BETA_STORAGE_CLASS])
    return str(_spec(pvc).get("storageClassName") or "")


def volume_class(pv: dict[str, Any]) -> str:
    """The volume's StorageClass name (``GetPersistentVolumeClass``)."""
    ann = _dict(_meta(pv).get("annotations"))
    if ANNOTATION_BETA_STORAGE_CLASS in ann:
        return str(ann[ANNOTATION_BETA_STORAGE_CLASS])
    return str(_spec(pv).get("storageClassName") or "")


def node_affinity(pv: dict[str, Any]) -> list[dict[str, Any]]:
    """The volume's required node affinity as contract terms (empty = any node)."""
    required = _dict(_dict(_spec(pv).get("nodeAffinity")).get("required"))
    terms = []
    for t in required.get("nodeSelectorTerms") or []:
        exprs = [
            {
                "key": str(_dict(e).get("key", "")),
                "operator": _dict(e).get("operator"),
                "values": [str(v) for v in _dict(e).get("values") or []],
            }
            for e in _dict(t).get("matchExpressions") or []
        ]
        if exprs:
            terms.append({"match_expressions": exprs})
    return terms


def zone_labels(pv: dict[str, Any]) -> dict[str, str]:
    """The volume's zone / region labels, the keys VolumeZone reads."""
    labels = _dict(_meta(pv).get("labels"))
    return {k: str(labels[k]) for k in ZONE_KEYS if k in labels}


def _quantity(value: Any) -> Fraction | None:
    try:
        return parse_quantity(value)
    except (ValueError, TypeError):
        return None


def request(pvc: dict[str, Any]) -> Fraction:
    """The claim's storage request (0 when it states none or an unreadable one)."""
    got = _quantity(_dict(_dict(_spec(pvc).get("resources")).get("requests")).get("storage", 0))
    return got if got is not None and got > 0 else Fraction(0)


def _capacity(pv: dict[str, Any]) -> Fraction | None:
    return _quantity(_dict(_spec(pv).get("capacity")).get("storage", 0))


def bound_to(pv: dict[str, Any], pvc: dict[str, Any]) -> bool:
    """The volume is (pre-)bound to this claim (``IsVolumeBoundToClaim``)."""
    ref = _dict(_spec(pv).get("claimRef"))
    meta = _meta(pvc)
    if not ref or ref.get("name") != meta.get("name") or ref.get("namespace") != meta.get("namespace"):
        return False
    return not ref.get("uid") or ref.get("uid") == meta.get("uid")


def _selector_matches(selector: dict[str, Any], labels: dict[str, Any]) -> bool:
    for k, v in _dict(selector.get("matchLabels")).items():
        if labels.get(k) != v:
            return False
    for raw in selector.get("matchExpressions") or []:
        e = _dict(raw)
        key, op, values = str(e.get("key") or ""), e.get("operator"), list(e.get("values") or [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def candidates(pvc: dict[str, Any], pvs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The volumes the unbound claim could bind to on some node, smallest first (then by name): every
    check of ``FindMatchingVolume`` but node affinity. A volume pre-bound to the claim is its only
    candidate: kube-scheduler takes it or, on a node it does not fit, no static volume at all."""
    spec = _spec(pvc)
    want = request(pvc)
    cls = claim_class(pvc)
    mode = spec.get("volumeMode") or "Filesystem"
    vac = spec.get("volumeAttributesClassName") or ""
    selector = spec.get("selector")
    modes = set(spec.get("accessModes") or [])
    found: list[tuple[Fraction, str, dict[str, Any]]] = []
    for pv in pvs:
        pspec = _spec(pv)
        name = str(_meta(pv).get("name") or "")
        size = _capacity(pv)
        if not name or size is None or size < want:
            continue
        if _dict(pspec.get("claimRef")) and not bound_to(pv, pvc):
            continue
        if (pspec.get("volumeMode") or "Filesystem") != mode or _meta(pv).get("deletionTimestamp"):
            continue
        if bound_to(pv, pvc):
            return [{"name": name, "node_affinity": node_affinity(pv)}]
        if _dict(pv.get("status")).get("phase") != "Available":
            continue
        if isinstance(selector, dict) and not _selector_matches(selector, _dict(_meta(pv).get("labels"))):
            continue
        if volume_class(pv) != cls or (pspec.get("volumeAttributesClassName") or "") != vac:
            continue
        if not modes <= set(pspec.get("accessModes") or []):
            continue
        found.append((size, name, pv))
    found.sort(key=lambda f: (f[0], f[1]))
    return [{"name": n, "node_affinity": node_affinity(pv)} for _, n, pv in found]


def allowed_topologies(sc: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The class's ``allowedTopologies`` as contract terms (empty = anywhere); None when it lists only
    empty terms, which match no node."""
    raw = sc.get("allowedTopologies") or []
    terms = []
    for t in raw:
        exprs = [
            {
                "key": str(_dict(e).get("key", "")),
                "operator": "In",
                "values": [str(v) for v in _dict(e).get("values") or []],
            }
            for e in _dict(t).get("matchLabelExpressions") or []
        ]
        if exprs:
            terms.append({"match_expressions": exprs})
    if raw and not terms:
        return None
    return terms


def provisions(sc: dict[str, Any] | None) -> bool:
    """The class names a provisioner that creates volumes (not ``kubernetes.io/no-provisioner``)."""
    return (
        bool(sc) and bool((sc or {}).get("provisioner")) and (sc or {}).get("provisioner") != NO_PROVISIONER
    )


def claim(
    name: str,
    pvc: dict[str, Any] | None,
    pv: dict[str, Any] | None,
    sc: dict[str, Any] | None,
    pvs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The contract's ``VolumeClaim`` fields for one claim of a pod. A claim that is missing, or bound to
    a volume that is missing, counts as an unbound Immediate one: the pod waits for it, as in
    kube-scheduler."""
    if pvc is not None and _spec(pvc).get("volumeName"):
        if pv is None or ANNOTATION_BIND_COMPLETED not in _dict(_meta(pvc).get("annotations")):
            # Bound to a missing volume, or pre-bound and not yet bound by the volume controller:
            # kube-scheduler refuses the pod until the binding completes.
            return {"claim": name, "bound": False}
        return {
            "claim": name,
            "bound": True,
            "node_affinity": node_affinity(pv),
            "zone_labels": zone_labels(pv),
        }
    if pvc is None or sc is None or sc.get("volumeBindingMode") != "WaitForFirstConsumer":
        return {"claim": name, "bound": False}
    out: dict[str, Any] = {
        "claim": name,
        "bound": False,
        "binding_mode": "WaitForFirstConsumer",
        "candidates": candidates(pvc, pvs or []),
        "request_bytes": int(-(-request(pvc) // 1)),
    }
    where = allowed_topologies(sc)
    if provisions(sc) and where is not None:
        out["provision"] = True
        out["allowed_topologies"] = where
    return out


def prebind_volume(pv: dict[str, Any], pvc: dict[str, Any]) -> dict[str, Any]:
    """The volume as kube-scheduler writes it to bind it to the claim (``GetBindVolumeToClaim``): a
    ``claimRef`` to the claim and the bound-by-controller annotation. The PersistentVolume controller then
    completes the binding."""
    meta = _meta(pvc)
    out = {**pv, "metadata": dict(_meta(pv)), "spec": dict(_spec(pv))}
    out["spec"]["claimRef"] = {
        "kind": "PersistentVolumeClaim",
        "apiVersion": "v1",
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    out["metadata"]["annotations"] = {
        **_dict(_meta(pv).get("annotations")),
        ANNOTATION_BOUND_BY_CONTROLLER: "yes",
    }
    return out


# -- VolumeRestrictions, NodeVolumeLimits, CSI storage capacity, generic ephemeral volumes ---------------

READ_WRITE_ONCE_POD: Final = "ReadWriteOncePod"


# CSI migration (k8s.io/csi-translation-lib v0.36.3, ``plugins/*.go``): the in-tree volume sources whose
# migration NodeVolumeLimits counts (``isCSIMigrationOn`` in nodevolumelimits/utils.go: AWS EBS, GCE PD,
# Azure Disk, Cinder, Portworx), by volume-source field: (in-tree plugin name, CSI driver name).
MIGRATED_SOURCES: Final = {
    "awsElasticBlockStore": ("kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
    "gcePersistentDisk": ("kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
    "azureDisk": ("kubernetes.io/azure-disk", "disk.csi.azure.com"),
    "cinder": ("kubernetes.io/cinder", "cinder.csi.openstack.org"),
    "portworxVolume": ("kubernetes.io/portworx-volume", "pxd.portworx.com"),
}
MIGRATED_PROVISIONERS: Final = dict(MIGRATED_SOURCES.values())
# Migratable plugins whose migration NodeVolumeLimits does not count: their claims count nowhere.
UNCOUNTED_PROVISIONERS: Final = frozenset({"kubernetes.io/azure-file", "kubernetes.io/vsphere-volume"})
_EBS_ID: Final = re.compile(r"^vol-[^/]*$")
_GCE_ZONE_KEYS: Final = ("failure-domain.beta.kubernetes.io/zone", "topology.kubernetes.io/zone")


def _ebs_volume_id(kubernetes_id: str) -> str | None:
    """``KubernetesVolumeIDToEBSVolumeID``: ``aws://<zone>/vol-…`` → ``vol-…``; a bare id stays; None
    when the URL form does not end in a ``vol-`` id."""
    if not kubernetes_id.startswith("aws://"):
        return kubernetes_id
    path = kubernetes_id[len("aws://") :].partition("/")[2].strip("/")
    return path if _EBS_ID.match(path) else None


def _gce_region(zones: list[str]) -> str | None:
    """``gceGetRegionFromZones``: the one region of ``{locale}-{region}-{zone}`` zones, else None."""
    regions = set()
    for zone in zones:
        parts = zone.split("-")
        if len(parts) != 3:
            return None
        regions.add("-".join(parts[:2]))
    return regions.pop() if len(regions) == 1 else None


def migrated_attachment(
    field: str, src: dict[str, Any], pv_labels: dict[str, Any] | None = None
) -> tuple[str, str] | None:
    """(CSI driver, volume handle) of an in-tree volume source (``field`` of a PV's spec or a pod's volume)
    as CSI migration translates it, for NodeVolumeLimits to count; None when the source is not one whose
    migration it counts, or its translation fails (kube-scheduler then does not count a PV's volume).
    ``pv_labels``: the PersistentVolume's labels (a GCE PD's handle carries its zone); None for an inline
    volume."""
    if field not in MIGRATED_SOURCES:
        return None
    driver = MIGRATED_SOURCES[field][1]
    if field == "awsElasticBlockStore":
        handle = _ebs_volume_id(str(src.get("volumeID") or ""))
    elif field == "gcePersistentDisk":
        name = str(src.get("pdName") or "")
        zone = ""
        if pv_labels is not None:
            zone = str(pv_labels.get(_GCE_ZONE_KEYS[0]) or pv_labels.get(_GCE_ZONE_KEYS[1]) or "")
        zones = zone.split("__")
        if len(zones) > 1:
            region = _gce_region(zones)
            handle = None if region is None else f"projects/UNSPECIFIED/regions/{region}/disks/{name}"
        else:
            handle = f"projects/UNSPECIFIED/zones/{zones[0] or 'UNSPECIFIED'}/disks/{name}"
    elif field == "azureDisk":
        kind = src.get("kind")
        # Only managed disks migrate ("kind(...) is not supported in csi migration").
        handle = str(src.get("diskURI") or "") if kind is None or str(kind).lower() == "managed" else None
    else:  # cinder, portworxVolume
        handle = str(src.get("volumeID") or "")
    return (driver, handle) if handle else None


def attachment(pvc: dict[str, Any], pv: dict[str, Any] | None, sc: dict[str, Any] | None) -> tuple[str, str]:
    """(driver, handle) of the CSI volume a claim attaches, as NodeVolumeLimits finds it
    (``getCSIDriverInfo``): the bound volume's ``spec.csi``, or its in-tree source as CSI migration
    translates it (:func:`migrated_attachment`); for an unbound claim, or one bound to a volume that is
    missing, its class's provisioner — an in-tree provisioner under its CSI driver's name — and no handle
    (the claim is the volume); ("", "") when there is none to count (a volume that is neither CSI nor
    migrated, a claim without a class or whose class is missing).

    kube-scheduler counts a migrated volume only on a node that has a CSINode object; a node without one
    has no attach limits either (``getVolumeLimits``), so translating here, for every node, counts the same.
    """
    if _spec(pvc).get("volumeName") and pv is not None:
        spec = _spec(pv)
        csi = _dict(spec.get("csi"))
        if csi:
            driver, handle = str(csi.get("driver") or ""), str(csi.get("volumeHandle") or "")
            return (driver, handle) if driver and handle else ("", "")
        for field in MIGRATED_SOURCES:
            if isinstance(spec.get(field), dict):
                got = migrated_attachment(field, spec[field], _dict(_meta(pv).get("labels")))
                return got if got is not None else ("", "")
        return ("", "")
    if not claim_class(pvc) or sc is None or not sc.get("provisioner"):
        return ("", "")
    provisioner = str(sc["provisioner"])
    if provisioner in UNCOUNTED_PROVISIONERS:
        return ("", "")
    return (MIGRATED_PROVISIONERS.get(provisioner, provisioner), "")


def _selector_terms(selector: dict[str, Any]) -> list[dict[str, Any]] | None:
    """A label selector as one node-selector term (its requirements ANDed); [] for the empty selector
    (every node); None when it cannot be read (kube-scheduler then skips the object)."""
    exprs: list[dict[str, Any]] = []
    for k, v in sorted(_dict(selector.get("matchLabels")).items()):
        exprs.append({"key": str(k), "operator": "In", "values": [str(v)]})
    for raw in selector.get("matchExpressions") or []:
        e = _dict(raw)
        op = e.get("operator")
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return None
        exprs.append(
            {
                "key": str(e.get("key") or ""),
                "operator": op,
                "values": [str(x) for x in e.get("values") or []],
            }
        )
    return exprs


def capacity_fields(
    pvc: dict[str, Any], sc: dict[str, Any], driver: dict[str, Any] | None, capacities: list[dict[str, Any]]
) -> dict[str, Any]:
    """What VolumeBinding's ``hasEnoughCapacity`` needs for a claim its class would provision: nothing
    when the claim requests no storage or the provisioner's CSIDriver does not opt into capacity tracking;
    else ``capacity_checked`` and where a CSIStorageCapacity of the class has room for the request
    (``maximumVolumeSize`` when set, else ``capacity``; a missing ``nodeTopology`` covers no node)."""
    requests = _dict(_dict(_spec(pvc).get("resources")).get("requests"))
    if "storage" not in requests or driver is None or _spec(driver).get("storageCapacity") is not True:
        return {}
    want = request(pvc)
    anywhere = False
    terms: list[dict[str, Any]] = []
    cls = str(_meta(sc).get("name") or "")
    for cap in capacities:
        if cap.get("storageClassName") != cls or not isinstance(cap.get("nodeTopology"), dict):
            continue
        raw = (
            cap.get("maximumVolumeSize") if cap.get("maximumVolumeSize") is not None else cap.get("capacity")
        )
        room = _quantity(raw) if raw is not None else None
        if room is None or -(-room // 1) < -(-want // 1):
            continue
        exprs = _selector_terms(cap["nodeTopology"])
        if exprs is None:
            continue
        if not exprs:
            anywhere = True
        elif {"match_expressions": exprs} not in terms:
            terms.append({"match_expressions": exprs})
    out: dict[str, Any] = {"capacity_checked": True}
    if anywhere:
        out["capacity_anywhere"] = True
    elif terms:
        out["capacity_topologies"] = terms
    return out


def storage_fields(
    pvc: dict[str, Any] | None,
    pv: dict[str, Any] | None,
    sc: dict[str, Any] | None,
    driver: dict[str, Any] | None = None,
    capacities: list[dict[str, Any]] | None = None,
    resolved: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The storage fields a resolved claim (:func:`claim`) gains: ReadWriteOncePod, the CSI volume it
    attaches, and for a claim to provision with capacity tracking, where there is room."""
    if pvc is None:
        return {}
    out: dict[str, Any] = {}
    if READ_WRITE_ONCE_POD in (_spec(pvc).get("accessModes") or []):
        out["read_write_once_pod"] = True
    driver_name, handle = attachment(pvc, pv, sc)
    if driver_name:
        out["attach_driver"] = driver_name
        if handle:
            out["attach_handle"] = handle
    if resolved is not None and resolved.get("provision") and sc is not None:
        out.update(capacity_fields(pvc, sc, driver, capacities or []))
    return out


def is_for_pod(pod: dict[str, Any], pvc: dict[str, Any]) -> bool:
    """The claim was created for this pod's generic ephemeral volume (``ephemeral.VolumeIsForPod``: the
    pod is its controller owner)."""
    uid = _meta(pod).get("uid")
    for ref in _meta(pvc).get("ownerReferences") or []:
        r = _dict(ref)
        if r.get("controller") is True:
            return bool(uid) and r.get("uid") == uid
    return False
