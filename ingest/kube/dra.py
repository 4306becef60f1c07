"""Dynamic Resource Allocation (``resource.k8s.io/v1``) for whole GPUs: pure translation, no API calls.

Hourglass schedules the subset of DRA that is a whole-GPU request in another spelling: a ResourceClaim whose
requests are each ``exactly: {deviceClassName: <a GPU class>, allocationMode: ExactCount, count: N}``. Such a
claim becomes the extended resource ``dra.hourglass.dev/<driver>`` (N devices) on the pod, and the node's
ResourceSlices of that driver become the same resource on the node, so the engine checks node capacity as it
does for any extended resource and charges queue quota and fair share N whole GPUs, as ``amd.com/gpu``
(:mod:`scheduler.engine.predicates.extended`). A DRA GPU and a device-plugin ``nvidia.com/gpu`` are kept apart
on purpose: a node whose GPUs are published by a DRA driver has no ``nvidia.com/gpu`` allocatable, and the
kubelet would refuse a device-plugin pod bound there (and the reverse).

Everything else DRA can express is refused with the field named (:func:`claim_request`), never placed as if
the claim were not there. The binder allocates the claim when it binds (:func:`allocation`,
``scheduler/kube/binder.py``), as kube-scheduler's dynamicresources plugin does in PreBind.

A *GPU device class* is a DeviceClass whose only selector is the CEL expression its driver's own chart ships
(:data:`GPU_DRIVERS`); devices of that driver count when they pass the same test (:func:`node_devices`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ingest.kube.translate import InvalidObject

__all__ = [
    "DRA_RESOURCE_PREFIX",
    "FINALIZER",
    "GPU_DRIVERS",
    "SliceDevice",
    "allocated_devices",
    "allocation",
    "choose_devices",
    "claim_name_for",
    "claim_request",
    "device_class_driver",
    "dra_refused",
    "dra_resource",
    "node_devices",
    "pod_claim_refs",
    "slice_devices",
]

API: Final = "/apis/resource.k8s.io/v1"
DRA_RESOURCE_PREFIX: Final = "dra.hourglass.dev/"
FINALIZER: Final = "resource.kubernetes.io/delete-protection"  # resourceapi.Finalizer
GPU_DRIVERS: Final[Mapping[str, str | None]] = {
    # driver -> the value of its ``type`` attribute a GPU has (None: every device of the driver is a GPU)
    "gpu.nvidia.com": "gpu",  # NVIDIA's DRA driver: also publishes MIG devices (type "mig")
    "gpu.example.com": None,  # kubernetes-sigs/dra-example-driver
}
# The selectors GPU classes ship with: NVIDIA's ``gpu.nvidia.com`` class and the example driver's.
_CLASS_CEL = re.compile(
    r"""\s*device\.driver\s*==\s*(['"])(?P<driver>[a-z0-9.-]+)\1"""
    r"""(?P<type>\s*&&\s*device\.attributes\[(['"])(?P=driver)\4\]\.type\s*==\s*(['"])(?P<value>[a-z0-9-]+)\5)?\s*"""
)


@dataclass(frozen=True, slots=True, order=True)
class SliceDevice:
    """One device a node's ResourceSlice publishes; the order (pool, name) is the allocation order."""

    driver: str
    pool: str
    name: str


def dra_resource(driver: str) -> str:
    """The extended resource a DRA GPU of ``driver`` is counted as, on pods and nodes."""
    return DRA_RESOURCE_PREFIX + driver


def dra_refused(key: str, field: str, value: object, problem: str) -> InvalidObject:
    """A pod refused for a DRA shape Hourglass does not schedule: Event ``DRANotSupported``, dead letter
    ``dra_not_supported``, the field named."""
    err = InvalidObject("Pod", key, field, value, problem + "; the pod stays pending")
    err.reason = "DRANotSupported"
    err.reason_code = "dra_not_supported"
    return err


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def device_class_driver(cls: Mapping[str, Any]) -> str | None:
    """The GPU driver a DeviceClass selects, or None when it is not a GPU class Hourglass understands
    (another driver, another selector, class-level config is allowed)."""
    selectors = _dict(cls.get("spec")).get("selectors") or []
    if len(selectors) != 1:
        return None
    expr = _dict(_dict(selectors[0]).get("cel")).get("expression")
    m = _CLASS_CEL.fullmatch(str(expr or ""))
    if m is None or m.group("driver") not in GPU_DRIVERS:
        return None
    want = GPU_DRIVERS[m.group("driver")]
    return m.group("driver") if m.group("value") == want else None


def _attribute(device: Mapping[str, Any], driver: str, name: str) -> str | None:
    attrs = _dict(device.get("attributes"))
    raw = _dict(attrs.get(name) or attrs.get(f"{driver}/{name}"))
    value = raw.get("string")
    return str(value) if value is not None else None


def slice_devices(obj: Mapping[str, Any]) -> tuple[str, str, str, int, list[SliceDevice]] | None:
    """A node-local ResourceSlice of a GPU driver: (node, driver, pool, pool generation, its GPUs); None for any other
    slice (another driver, or devices not local to one node: ``nodeSelector`` / ``allNodes``)."""
    spec = _dict(obj.get("spec"))
    driver, node = str(spec.get("driver") or ""), str(spec.get("nodeName") or "")
    if driver not in GPU_DRIVERS or not node:
        return None
    pool = _dict(spec.get("pool"))
    want = GPU_DRIVERS[driver]
    devices = [
        SliceDevice(driver, str(pool.get("name") or ""), str(_dict(d).get("name") or ""))
        for d in spec.get("devices") or []
        if want is None or _attribute(_dict(d), driver, "type") == want
    ]
    return node, driver, str(pool.get("name") or ""), int(pool.get("generation") or 0), devices


def node_devices(slices: Iterable[tuple[str, str, str, int, list[SliceDevice]]]) -> list[SliceDevice]:
    """A node's GPUs from its slices, in allocation order: only each pool's newest generation counts, as
    the structured allocator uses only the newest generation of a pool."""
    all_slices = list(slices)
    newest: dict[tuple[str, str], int] = {}
    for _, driver, pool, gen, _ in all_slices:
        newest[(driver, pool)] = max(newest.get((driver, pool), gen), gen)
    out = {d for _, drv, pool, gen, devs in all_slices if newest[(drv, pool)] == gen for d in devs}
    return sorted(out)


def pod_claim_refs(obj: Mapping[str, Any]) -> list[tuple[str, str | None, str]]:
    """A pod's ``spec.resourceClaims`` as (entry name, claim name or None while a template's claim is not
    generated yet, the field path). A template's claim is named in ``status.resourceClaimStatuses`` by
    kube-controller-manager's resourceclaim controller."""
    spec = _dict(obj.get("spec"))
    generated = {
        str(_dict(s).get("name")): _dict(s).get("resourceClaimName")
        for s in _dict(obj.get("status")).get("resourceClaimStatuses") or []
    }
    out: list[tuple[str, str | None, str]] = []
    for i, entry in enumerate(spec.get("resourceClaims") or []):
        entry = _dict(entry)
        name = str(entry.get("name") or "")
        if entry.get("resourceClaimName"):
            out.append((name, str(entry["resourceClaimName"]), f"spec.resourceClaims[{i}].resourceClaimName"))
        else:
            claim = generated.get(name)
            out.append(
                (name, str(claim) if claim else None, f"spec.resourceClaims[{i}].resourceClaimTemplateName")
            )
    return out


def claim_name_for(pod: Mapping[str, Any], entry: str) -> str | None:
    """The ResourceClaim a pod's ``spec.resourceClaims`` entry resolves to (None: not generated yet)."""
    for name, claim, _ in pod_claim_refs(pod):
        if name == entry:
            return claim
    return None


_UNSUPPORTED_EXACT: Final = {
    "selectors": "CEL selectors on the request",
    "adminAccess": "admin access",
    "tolerations": "device taint tolerations",
    "capacity": "consumable device capacity",
}


def claim_request(
    key: str, field: str, claim: Mapping[str, Any], classes: Mapping[str, Mapping[str, Any]], pod_uid: str
) -> dict[str, int]:
    """The extended resources (``dra.hourglass.dev/<driver>`` -> devices) a ResourceClaim asks for.

    ``field`` names the pod's claim entry, ``classes`` the DeviceClasses by name, ``pod_uid`` the pod (a
    claim already allocated is accepted only when it is reserved for this pod). Raises
    :func:`dra_refused` naming the field for every shape outside whole GPUs of a GPU class.
    """
    name = str(_dict(claim.get("metadata")).get("name") or "")
    where = f"{field} (ResourceClaim {name})"
    devices = _dict(_dict(claim.get("spec")).get("devices"))
    if devices.get("constraints"):
        raise dra_refused(
            key,
            f"{where} spec.devices.constraints",
            devices["constraints"],
            "device constraints are not scheduled by Hourglass",
        )
    status = _dict(claim.get("status"))
    if status.get("allocation") is not None:
        mine = any(_dict(r).get("uid") == pod_uid for r in status.get("reservedFor") or [])
        if not mine:
            raise dra_refused(
                key,
                f"{where} status.allocation",
                "allocated",
                "is already allocated for another consumer; sharing a claim between pods is not scheduled by Hourglass",
            )
    out: dict[str, int] = {}
    requests = devices.get("requests") or []
    if not requests:
        raise dra_refused(key, f"{where} spec.devices.requests", requests, "requests no device")
    for i, req in enumerate(requests):
        req = _dict(req)
        rfield = f"{where} spec.devices.requests[{i}]"
        if req.get("firstAvailable"):
            raise dra_refused(
                key,
                f"{rfield}.firstAvailable",
                req.get("name"),
                "prioritized lists are not scheduled by Hourglass",
            )
        exact = _dict(req.get("exactly"))
        if not exact:
            raise dra_refused(
                key, f"{rfield}.exactly", None, "is required (the only request form Hourglass schedules)"
            )
        for k, what in _UNSUPPORTED_EXACT.items():
            if exact.get(k):
                raise dra_refused(
                    key, f"{rfield}.exactly.{k}", exact[k], f"{what} are not scheduled by Hourglass"
                )
        mode = exact.get("allocationMode") or "ExactCount"
        if mode != "ExactCount":
            raise dra_refused(
                key, f"{rfield}.exactly.allocationMode", mode, "only ExactCount is scheduled by Hourglass"
            )
        count = exact.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise dra_refused(key, f"{rfield}.exactly.count", count, "must be a positive integer")
        cls_name = str(exact.get("deviceClassName") or "")
        cls = classes.get(cls_name)
        if cls is None:
            raise dra_refused(key, f"{rfield}.exactly.deviceClassName", cls_name, "no such DeviceClass")
        driver = device_class_driver(cls)
        if driver is None:
            raise dra_refused(
                key,
                f"{rfield}.exactly.deviceClassName",
                cls_name,
                "is not a whole-GPU class Hourglass schedules (its one selector must be its driver's own: "
                + ", ".join(sorted(GPU_DRIVERS))
                + ")",
            )
        res = dra_resource(driver)
        out[res] = out.get(res, 0) + count
    return out


def choose_devices(
    claim: Mapping[str, Any],
    classes: Mapping[str, Mapping[str, Any]],
    node_gpus: list[SliceDevice],
    in_use: set[SliceDevice],
) -> list[tuple[str, SliceDevice]] | None:
    """(request name, device) for each device a translated claim needs: the first free devices of the
    request's driver on the node in (pool, name) order, as the structured allocator tries devices in slice
    order. None when the node has too few free."""
    taken = set(in_use)
    out: list[tuple[str, SliceDevice]] = []
    for req in _dict(_dict(claim.get("spec")).get("devices")).get("requests") or []:
        req = _dict(req)
        exact = _dict(req.get("exactly"))
        driver = device_class_driver(classes.get(str(exact.get("deviceClassName") or "")) or {})
        count = int(exact.get("count", 1))
        free = [d for d in node_gpus if d.driver == driver and d not in taken][:count]
        if len(free) < count:
            return None
        taken.update(free)
        out.extend((str(req.get("name") or ""), d) for d in free)
    return out


def allocation(
    claim: Mapping[str, Any],
    classes: Mapping[str, Mapping[str, Any]],
    chosen: list[tuple[str, SliceDevice]],
    node: str,
) -> dict[str, Any]:
    """The claim's ``status.allocation`` as kube-scheduler's allocator writes it: one result per device, the
    class configs (source ``FromClass``) then the claim's own (``FromClaim``), and a node selector on the
    node's name (the devices are node-local)."""
    spec_devices = _dict(_dict(claim.get("spec")).get("devices"))
    config: list[dict[str, Any]] = []
    for req in spec_devices.get("requests") or []:
        req = _dict(req)
        cls = classes.get(str(_dict(req.get("exactly")).get("deviceClassName") or "")) or {}
        for c in _dict(cls.get("spec")).get("config") or []:
            config.append({"source": "FromClass", "requests": [str(req.get("name") or "")], **_dict(c)})
    for c in spec_devices.get("config") or []:
        config.append({"source": "FromClaim", **_dict(c)})
    devices: dict[str, Any] = {
        "results": [{"request": r, "driver": d.driver, "pool": d.pool, "device": d.name} for r, d in chosen]
    }
    if config:
        devices["config"] = config
    return {
        "devices": devices,
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }


def allocated_devices(claims: Iterable[Mapping[str, Any]]) -> set[SliceDevice]:
    """Every device some claim's ``status.allocation`` holds (what the allocator treats as in use)."""
    out: set[SliceDevice] = set()
    for c in claims:
        alloc = _dict(_dict(c.get("status")).get("allocation"))
        for r in _dict(alloc.get("devices")).get("results") or []:
            r = _dict(r)
            out.add(
                SliceDevice(str(r.get("driver") or ""), str(r.get("pool") or ""), str(r.get("device") or ""))
            )
    return out
