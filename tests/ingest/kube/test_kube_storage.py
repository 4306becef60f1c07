"""What ingest reads for kube-scheduler's storage filters beyond binding: inline disks (VolumeRestrictions),
ReadWriteOncePod and the CSI volume a claim attaches (NodeVolumeLimits, ``csi.go`` ``getCSIDriverInfo``),
CSIStorageCapacity for claims to provision (``binder.go`` ``hasEnoughCapacity``), generic ephemeral volumes'
claims (``ephemeral.VolumeClaimName`` / ``VolumeIsForPod``), CSINodes; and how the fold applies the new
events."""

from __future__ import annotations

from typing import Any

import pytest

from ingest.events import CSINodeUpserted, PodBound, PodSubmitted, PodVolumesChanged, VolumeClaim
from ingest.kube import translate as kube
from ingest.kube import volumes
from scheduler.engine.state import CSINode, PodStatus, StateBuilder

EBS = "ebs.csi.aws.com"
GCE = "pd.csi.storage.gke.io"


def _pvc(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "data", "namespace": "ns", "uid": "u1"}, "spec": spec}


def test_inline_disks_are_read_with_the_csi_volume_they_migrate_to() -> None:
    spec = {
        "volumes": [
            {"name": "a", "gcePersistentDisk": {"pdName": "pd", "readOnly": True}},
            {"name": "b", "awsElasticBlockStore": {"volumeID": "vol-1"}},
            {"name": "c", "rbd": {"monitors": ["m1", "m2"], "pool": "rbd", "image": "img"}},
            {"name": "d", "iscsi": {"iqn": "iqn.2016-12.server:t1", "targetPortal": "p", "lun": 0}},
            {"name": "e", "configMap": {"name": "x"}},
            {"name": "f", "csi": {"driver": "inline.csi.example.com"}},
            {"name": "g", "azureDisk": {"diskName": "d", "diskURI": "/subscriptions/s/disks/d"}},
            {"name": "h", "cinder": {"volumeID": "c-1"}},
            {"name": "i", "portworxVolume": {"volumeID": "px-1"}},
        ]
    }
    got = [d.model_dump(exclude_defaults=True) for d in kube.inline_disks("ns/p", spec)]
    gce = "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/pd"
    assert got == [
        {"kind": "gce_pd", "name": "pd", "read_only": True, "attach_driver": GCE, "attach_handle": gce},
        {"kind": "aws_ebs", "name": "vol-1", "attach_driver": EBS, "attach_handle": "vol-1"},
        {"kind": "rbd", "name": "img", "pool": "rbd", "monitors": ["m1", "m2"]},
        {"kind": "iscsi", "name": "iqn.2016-12.server:t1"},
        {"kind": "azure_disk", "name": "/subscriptions/s/disks/d", "attach_driver": "disk.csi.azure.com",
         "attach_handle": "/subscriptions/s/disks/d"},
        {"kind": "cinder", "name": "c-1", "attach_driver": "cinder.csi.openstack.org", "attach_handle": "c-1"},
        {"kind": "portworx", "name": "px-1", "attach_driver": "pxd.portworx.com", "attach_handle": "px-1"},
    ]  # fmt: skip


def test_an_inline_disk_whose_migration_fails_keeps_its_driver_without_a_handle() -> None:
    # csi-translation-lib: an ``aws://`` id not ending in ``vol-…`` and an Azure disk of another kind than
    # Managed (the API server defaults kind to Shared) do not translate; kube-scheduler's filter errors.
    spec = {
        "volumes": [
            {"name": "a", "awsElasticBlockStore": {"volumeID": "aws://us-east-1a/disk-1"}},
            {"name": "b", "azureDisk": {"diskName": "d", "diskURI": "https://blob/d", "kind": "Shared"}},
        ]
    }
    got = [d.model_dump(exclude_defaults=True) for d in kube.inline_disks("ns/p", spec)]
    assert got == [
        {"kind": "aws_ebs", "name": "aws://us-east-1a/disk-1", "attach_driver": EBS},
        {"kind": "azure_disk", "name": "https://blob/d", "attach_driver": "disk.csi.azure.com"},
    ]


def test_an_inline_disk_without_its_name_is_an_invalid_pod_naming_the_field() -> None:
    with pytest.raises(kube.InvalidObject) as err:
        kube.inline_disks("ns/p", {"volumes": [{"name": "x"}, {"name": "y", "awsElasticBlockStore": {}}]})
    assert err.value.field == "spec.volumes[1].awsElasticBlockStore"


def test_pod_claims_name_generic_ephemeral_claims_pod_dash_volume() -> None:
    pod = {
        "metadata": {"name": "abc", "namespace": "test"},
        "spec": {
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "db"}},
                {"name": "xyz", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "cfg", "configMap": {"name": "c"}},
            ]
        },
    }
    assert kube.pod_claims(pod) == [("db", False), ("abc-xyz", True)]


def test_an_ephemeral_claim_is_the_pods_only_when_the_pod_is_its_controller() -> None:
    pod = {"metadata": {"name": "abc", "uid": "12345"}}
    owned = {"metadata": {"ownerReferences": [{"kind": "Pod", "uid": "12345", "controller": True}]}}
    other = {"metadata": {"ownerReferences": [{"kind": "Pod", "uid": "999", "controller": True}]}}
    not_controller = {"metadata": {"ownerReferences": [{"kind": "Pod", "uid": "12345"}]}}
    assert volumes.is_for_pod(pod, owned)
    assert not volumes.is_for_pod(pod, other)
    assert not volumes.is_for_pod(pod, not_controller)
    assert not volumes.is_for_pod(pod, {"metadata": {}})


@pytest.mark.parametrize(
    ("pvc", "pv", "sc", "want"),
    [
        # Bound to a CSI volume: its driver and handle.
        (
            _pvc(volumeName="pv1"),
            {"spec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"}}},
            None,
            ("ebs.csi.aws.com", "vol-1"),
        ),
        # Bound to an in-tree volume no CSI driver replaces: not counted.
        (_pvc(volumeName="pv1"), {"spec": {"hostPath": {"path": "/tmp"}}}, None, ("", "")),
        # Bound to a migrated in-tree volume: the CSI volume it translates to.
        (
            _pvc(volumeName="pv1"),
            {"spec": {"awsElasticBlockStore": {"volumeID": "aws://us-west-2a/vol-02399794d890f9375"}}},
            None,
            (EBS, "vol-02399794d890f9375"),
        ),
        # Unbound, with an in-tree provisioner: its CSI driver; one whose migration is not counted: nothing.
        (_pvc(storageClassName="sc"), None, {"provisioner": "kubernetes.io/aws-ebs"}, (EBS, "")),
        (_pvc(storageClassName="sc"), None, {"provisioner": "kubernetes.io/azure-file"}, ("", "")),
        # Bound to a missing volume, or unbound: the class's provisioner, the claim itself the volume.
        (
            _pvc(volumeName="gone", storageClassName="sc"),
            None,
            {"provisioner": "ebs.csi.aws.com"},
            ("ebs.csi.aws.com", ""),
        ),
        (_pvc(storageClassName="sc"), None, {"provisioner": "ebs.csi.aws.com"}, ("ebs.csi.aws.com", "")),
        # No class, or a missing class: nothing to count.
        (_pvc(), None, None, ("", "")),
        (_pvc(storageClassName="sc"), None, None, ("", "")),
    ],
)
def test_the_csi_volume_a_claim_attaches(pvc: Any, pv: Any, sc: Any, want: tuple[str, str]) -> None:
    assert volumes.attachment(pvc, pv, sc) == want


def test_read_write_once_pod_and_attachment_are_claim_fields() -> None:
    pvc = _pvc(storageClassName="sc", accessModes=["ReadWriteOncePod"])
    got = volumes.storage_fields(pvc, None, {"provisioner": "d"})
    assert got == {"read_write_once_pod": True, "attach_driver": "d"}
    assert volumes.storage_fields(None, None, None) == {}


SC = {"metadata": {"name": "fast"}, "provisioner": "d", "volumeBindingMode": "WaitForFirstConsumer"}
TRACKED = {"metadata": {"name": "d"}, "spec": {"storageCapacity": True}}


def _cap(
    cls: str = "fast", topology: Any = None, capacity: str | None = "10Gi", maximum: str | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {"storageClassName": cls}
    if topology is not None:
        out["nodeTopology"] = topology
    if capacity is not None:
        out["capacity"] = capacity
    if maximum is not None:
        out["maximumVolumeSize"] = maximum
    return out


def test_capacity_keeps_the_topologies_with_room_for_the_request() -> None:
    pvc = _pvc(storageClassName="fast", resources={"requests": {"storage": "5Gi"}})
    zone_a = {"matchLabels": {"zone": "a"}}
    caps = [
        _cap(topology=zone_a),
        _cap(topology={"matchLabels": {"zone": "b"}}, capacity="1Gi"),  # too small
        _cap(
            topology={"matchLabels": {"zone": "c"}}, capacity="100Gi", maximum="1Gi"
        ),  # maximumVolumeSize wins
        _cap(cls="slow", topology={"matchLabels": {"zone": "d"}}),  # another class
        _cap(topology=None),  # no nodeTopology: covers no node
        _cap(topology={"matchExpressions": [{"key": "rack", "operator": "Exists"}]}),
    ]
    got = volumes.capacity_fields(pvc, SC, TRACKED, caps)
    assert got == {
        "capacity_checked": True,
        "capacity_topologies": [
            {"match_expressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"match_expressions": [{"key": "rack", "operator": "Exists", "values": []}]},
        ],
    }
    VolumeClaim.model_validate({"claim": "data", **got})  # the contract accepts it
    assert volumes.capacity_fields(pvc, SC, TRACKED, [_cap(topology={})]) == {
        "capacity_checked": True,
        "capacity_anywhere": True,
    }
    assert volumes.capacity_fields(pvc, SC, TRACKED, []) == {"capacity_checked": True}


def test_capacity_is_not_checked_without_a_request_or_a_tracking_driver() -> None:
    assert volumes.capacity_fields(_pvc(storageClassName="fast"), SC, TRACKED, []) == {}
    pvc = _pvc(storageClassName="fast", resources={"requests": {"storage": "5Gi"}})
    assert volumes.capacity_fields(pvc, SC, None, []) == {}
    assert volumes.capacity_fields(pvc, SC, {"spec": {"storageCapacity": False}}, []) == {}


def test_a_csinode_becomes_its_drivers_and_limits() -> None:
    obj = {
        "metadata": {"name": "node-a"},
        "spec": {
            "drivers": [
                {"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": 25}},
                {"name": "nfs.csi.k8s.io", "nodeID": "node-a"},
            ]
        },
    }
    ev = kube.csi_node_upserted(obj, 5, [("ebs.csi.aws.com", "vol-2"), ("ebs.csi.aws.com", "vol-1")])
    assert [(d.name, d.count) for d in ev.drivers] == [("ebs.csi.aws.com", 25), ("nfs.csi.k8s.io", None)]
    assert [(a.driver, a.handle) for a in ev.attached] == [
        ("ebs.csi.aws.com", "vol-1"),
        ("ebs.csi.aws.com", "vol-2"),
    ]
    bad = {"metadata": {"name": "node-a"}, "spec": {"drivers": [{"name": "d", "allocatable": {"count": -1}}]}}
    with pytest.raises(kube.InvalidObject):
        kube.csi_node_upserted(bad, 5)


def test_the_fold_keeps_csinode_limits_and_updates_only_pending_pods_volumes() -> None:
    b = StateBuilder()
    b.apply(CSINodeUpserted(at_ms=1, name="n1", drivers=[{"name": "d", "count": 2}]))  # type: ignore[list-item]
    assert b.snapshot().csi_nodes == (("n1", CSINode(drivers=(("d", 2),))),)
    b.apply(
        PodSubmitted(
            at_ms=2,
            name="p",
            namespace="ns",
            pod_group="g",
            created_at_ms=2,
            volumes=[VolumeClaim(claim="c", bound=False)],
        )
    )
    b.apply(
        PodVolumesChanged(
            at_ms=3, name="p", namespace="ns", volumes=[VolumeClaim(claim="c", attach_driver="d")]
        )
    )
    pod = b.pods["ns/p"]
    assert pod.status is PodStatus.PENDING and pod.volumes[0].bound and pod.volumes[0].attach_driver == "d"
    b.apply(PodVolumesChanged(at_ms=4, name="nobody", namespace="ns"))  # an unknown pod: nothing happens
    assert set(b.pods) == {"ns/p"}
    b.apply(PodBound(at_ms=5, name="p", namespace="ns", node="n1"))
    b.apply(PodVolumesChanged(at_ms=6, name="p", namespace="ns"))  # placed: keeps what it was placed with
    assert b.pods["ns/p"].volumes[0].attach_driver == "d"


# csi-translation-lib v0.36.3: plugins/aws_ebs_test.go TestKubernetesVolumeIDToEBSVolumeID,
# plugins/gce_pd_test.go TestTranslateInTreePVToCSIVolIDFmt, plugins/azure_disk_test.go
# TestTranslateAzureDiskInTreePVToCSI ("azure disk volume with non-managed kind" fails).
@pytest.mark.parametrize(
    ("field", "src", "labels", "want"),
    [
        ("awsElasticBlockStore", {"volumeID": "vol-02399794d890f9375"}, None, (EBS, "vol-02399794d890f9375")),
        ("awsElasticBlockStore", {"volumeID": "aws:///vol-02399794d890f9375"}, None, (EBS, "vol-02399794d890f9375")),
        (
            "awsElasticBlockStore",
            {"volumeID": "aws://us-west-2a/vol-02399794d890f9375"},
            None,
            (EBS, "vol-02399794d890f9375"),
        ),
        ("awsElasticBlockStore", {"volumeID": "aws://us-west-2a/02399794d890f9375"}, None, None),
        (
            "gcePersistentDisk",
            {"pdName": "pd-name"},
            {"failure-domain.beta.kubernetes.io/zone": "us-east1-a"},
            (GCE, "projects/UNSPECIFIED/zones/us-east1-a/disks/pd-name"),
        ),
        (
            "gcePersistentDisk",
            {"pdName": "pd-name"},
            {"topology.kubernetes.io/zone": "us-east1-a"},
            (GCE, "projects/UNSPECIFIED/zones/us-east1-a/disks/pd-name"),
        ),
        (
            "gcePersistentDisk",
            {"pdName": "pd-name"},
            {"topology.kubernetes.io/zone": "us-central1-a__us-central1-c"},
            (GCE, "projects/UNSPECIFIED/regions/us-central1/disks/pd-name"),
        ),
        ("gcePersistentDisk", {"pdName": "pd-name"}, None, (GCE, "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/pd-name")),
        ("azureDisk", {"diskName": "d", "diskURI": "datadiskuri"}, None, ("disk.csi.azure.com", "datadiskuri")),
        ("azureDisk", {"diskName": "d", "diskURI": "datadiskuri", "kind": "Managed"}, None, ("disk.csi.azure.com", "datadiskuri")),
        ("azureDisk", {"diskName": "d", "diskURI": "datadiskuri", "kind": "Dedicated"}, None, None),
        ("cinder", {"volumeID": "c-1"}, None, ("cinder.csi.openstack.org", "c-1")),
        ("portworxVolume", {"volumeID": "px-1"}, None, ("pxd.portworx.com", "px-1")),
        # Migratable, but NodeVolumeLimits does not count their migration (``isCSIMigrationOn``).
        ("azureFile", {"shareName": "s", "secretName": "x"}, None, None),
        ("vsphereVolume", {"volumePath": "[ds] v.vmdk"}, None, None),
    ],
)  # fmt: skip
def test_csi_migration_translates_in_tree_sources_as_csi_translation_lib(
    field: str, src: dict[str, Any], labels: dict[str, str] | None, want: tuple[str, str] | None
) -> None:
    assert volumes.migrated_attachment(field, src, labels) == want
