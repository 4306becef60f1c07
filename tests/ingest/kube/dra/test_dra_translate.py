"""DRA translation (ingest/kube/dra.py): which ResourceClaims become whole-GPU requests, which are refused
with the field named, and how a node's ResourceSlices become its DRA GPUs. Shapes from Kubernetes' DRA docs
and kubernetes-sigs/dra-example-driver (class ``device.driver == 'gpu.example.com'``), and NVIDIA's
k8s-dra-driver-gpu class ``gpu.nvidia.com``."""

from __future__ import annotations

from typing import Any

import pytest

from ingest.kube import dra
from ingest.kube import translate as kube
from tests.support.dra_objects import DRIVER, device_class, dra_pod, gpu_claim, resource_slice

CLASSES = {DRIVER: device_class()}
RES = f"dra.hourglass.dev/{DRIVER}"


def _request(claim: dict[str, Any], classes: dict[str, Any] | None = None) -> dict[str, int]:
    return dra.claim_request(
        "ns/p", "spec.resourceClaims[0].resourceClaimName", claim, classes or CLASSES, "u1"
    )


def test_an_exact_count_claim_of_a_gpu_class_is_n_whole_gpus() -> None:
    assert _request(gpu_claim("c", count=2)) == {RES: 2}
    plain = gpu_claim("c")
    del plain["spec"]["devices"]["requests"][0]["exactly"]["count"]  # ExactCount defaults to one
    assert _request(plain) == {RES: 1}


def test_the_pod_carries_the_claim_as_an_extended_resource_counted_as_gpus() -> None:
    from scheduler.engine.predicates.extended import gpu_equivalent_milli

    pod = dra_pod("p", "q", claim="c")
    pod["metadata"]["namespace"] = "ns"
    ev = kube.pod_submitted(pod, "pg", 1, dra={RES: 2})
    assert ev.requests.extended == {RES: 2} and ev.requests.gpus == 0
    assert gpu_equivalent_milli(ev.requests.extended.items()) == 2000  # charged to the queue as 2 GPUs
    with pytest.raises(kube.InvalidObject) as err:  # claims ingest did not resolve: still refused
        kube.pod_submitted(pod, "pg", 1)
    assert err.value.reason == "DRANotSupported"


@pytest.mark.parametrize(
    ("exactly", "field"),
    [
        ({"allocationMode": "All"}, "exactly.allocationMode"),
        (
            {"selectors": [{"cel": {"expression": "device.attributes['gpu.example.com'].model == 'x'"}}]},
            "exactly.selectors",
        ),
        ({"adminAccess": True}, "exactly.adminAccess"),
        ({"count": 0}, "exactly.count"),
        ({"deviceClassName": "missing"}, "exactly.deviceClassName"),
    ],
)
def test_shapes_beyond_whole_gpus_are_refused_naming_the_field(exactly: dict[str, Any], field: str) -> None:
    with pytest.raises(kube.InvalidObject) as err:
        _request(gpu_claim("c", **exactly))
    assert (err.value.reason, err.value.reason_code) == ("DRANotSupported", "dra_not_supported")
    assert field in err.value.message and "ResourceClaim c" in err.value.message


def test_prioritized_lists_constraints_and_foreign_classes_are_refused() -> None:
    first = gpu_claim("c")
    first["spec"]["devices"]["requests"] = [
        {"name": "gpu", "firstAvailable": [{"name": "a", "deviceClassName": DRIVER}]}
    ]
    constrained = gpu_claim("c")
    constrained["spec"]["devices"]["constraints"] = [{"matchAttribute": "gpu.example.com/model"}]
    nic = {"nic": device_class("nic", "device.driver == 'nic.example.com'")}
    other = {
        DRIVER: device_class(
            DRIVER, "device.driver == 'gpu.example.com' && device.attributes['gpu.example.com'].model == 'x'"
        )
    }
    for claim, classes, field in [
        (first, CLASSES, "firstAvailable"),
        (constrained, CLASSES, "spec.devices.constraints"),
        (gpu_claim("c", cls="nic"), nic, "deviceClassName"),
        (gpu_claim("c"), other, "deviceClassName"),  # a class narrowing by CEL is not a whole-GPU class
    ]:
        with pytest.raises(kube.InvalidObject) as err:
            _request(claim, classes)
        assert field in err.value.message


def test_an_allocated_claim_is_accepted_only_for_its_own_pod() -> None:
    claim = gpu_claim("c")
    claim["status"] = {
        "allocation": {"devices": {"results": []}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}],
    }
    assert _request(claim) == {RES: 1}
    claim["status"]["reservedFor"][0]["uid"] = "other"
    with pytest.raises(kube.InvalidObject, match=r"status\.allocation"):
        _request(claim)


def test_gpu_classes_of_nvidia_and_the_example_driver() -> None:
    nvidia = device_class(
        "gpu.nvidia.com",
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
    )
    assert dra.device_class_driver(nvidia) == "gpu.nvidia.com"
    assert dra.device_class_driver(device_class()) == DRIVER
    mig = device_class(
        "mig.nvidia.com",
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'",
    )
    assert dra.device_class_driver(mig) is None


def test_node_devices_in_pool_and_name_order_newest_generation_only() -> None:
    old = dra.slice_devices(resource_slice("n1", ["gpu-9"], generation=1, name="old"))
    new = dra.slice_devices(resource_slice("n1", ["gpu-1", "gpu-0"], generation=2, name="new"))
    assert old is not None and new is not None
    got = dra.node_devices([old, new])
    assert [d.name for d in got] == ["gpu-0", "gpu-1"]
    nvidia = resource_slice("n1", ["gpu-0", "mig-0"], driver="gpu.nvidia.com")
    nvidia["spec"]["devices"][0]["attributes"]["type"] = {"string": "gpu"}
    nvidia["spec"]["devices"][1]["attributes"]["type"] = {"string": "mig"}
    got_nv = dra.slice_devices(nvidia)
    assert got_nv is not None and [d.name for d in got_nv[4]] == ["gpu-0"]  # MIG devices are not whole GPUs
    assert dra.slice_devices(resource_slice("n1", ["x"], driver="nic.example.com")) is None


def test_a_template_claim_is_found_in_the_pod_status() -> None:
    pod = dra_pod("p", "q", template="one-gpu")
    assert dra.pod_claim_refs(pod) == [("gpu", None, "spec.resourceClaims[0].resourceClaimTemplateName")]
    pod["status"] = {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "p-gpu-x1"}]}
    assert dra.claim_name_for(pod, "gpu") == "p-gpu-x1"


def test_the_allocation_object_as_kube_schedulers_allocator_writes_it() -> None:
    cls = device_class(config=[{"opaque": {"driver": DRIVER, "parameters": {"a": 1}}}])
    claim = gpu_claim("c", count=2)
    devs = dra.node_devices(
        [s for s in [dra.slice_devices(resource_slice("n1", ["gpu-0", "gpu-1", "gpu-2"]))] if s]
    )
    in_use = {dra.SliceDevice(DRIVER, "n1", "gpu-0")}
    chosen = dra.choose_devices(claim, {DRIVER: cls}, devs, in_use)
    assert chosen is not None and [d.name for _, d in chosen] == ["gpu-1", "gpu-2"]
    assert dra.allocation(claim, {DRIVER: cls}, chosen, "n1") == {
        "devices": {
            "results": [
                {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-1"},
                {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": "gpu-2"},
            ],
            "config": [
                {
                    "source": "FromClass",
                    "requests": ["gpu"],
                    "opaque": {"driver": DRIVER, "parameters": {"a": 1}},
                }
            ],
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
            ]
        },
    }
    assert dra.choose_devices(gpu_claim("c", count=3), {DRIVER: cls}, devs, in_use) is None
    held = [
        {
            "status": {
                "allocation": {"devices": {"results": [{"driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}}
            }
        }
    ]
    assert dra.allocated_devices(held) == in_use
