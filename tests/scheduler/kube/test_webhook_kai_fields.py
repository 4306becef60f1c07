"""The webhook's KAI details: the GPU container of ``gpu-fraction-container-name`` (init containers first,
as KAI's ``GetFractionContainerRef`` in ``pkg/binder/common/gpu_access.go``) and ``runtimeClassName`` on
fractional pods only when configured (KAI's ``runtimeenforcement`` mutator with ``gpuPodRuntimeClassName``).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from scheduler.kube.webhook import MutationRefused, mutation, review


def _kai_init_container_pod(**spec: Any) -> dict[str, Any]:
    """KAI's docs/gpu-sharing/gpu-sharing-init-container.yaml, with our scheduler name."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "gpu-sharing-init-container",
            "labels": {"kai.scheduler/queue": "default-queue"},
            "annotations": {"gpu-fraction": "0.5", "gpu-fraction-container-name": "gpu-init"},
        },
        "spec": {
            "schedulerName": "hourglass",
            "initContainers": [
                {"name": "gpu-init", "image": "nvidia/cuda:13.0.2-base-ubi8", "command": ["nvidia-smi"]}
            ],
            "containers": [{"name": "main-app", "image": "ubuntu", "args": ["sleep", "infinity"]}],
            **spec,
        },
    }


def _paths(ops: list[dict[str, Any]]) -> dict[str, Any]:
    return {op["path"]: op["value"] for op in ops}


def test_fraction_container_name_naming_an_init_container_wires_the_init_container() -> None:
    ops = _paths(mutation(_kai_init_container_pod(), "req", "hourglass"))
    assert "/spec/initContainers/0/env" in ops
    assert not any(p.startswith("/spec/containers/") for p in ops)
    assert [e["name"] for e in ops["/spec/initContainers/0/env"]] == [
        "NVIDIA_VISIBLE_DEVICES",
        "GPU_PORTION",
        "RUNAI_NUM_OF_GPUS",
    ]


def test_init_container_is_searched_before_a_regular_container_of_the_same_name() -> None:
    obj = _kai_init_container_pod()
    obj["spec"]["containers"].append({"name": "gpu-init", "image": "x"})
    assert "/spec/initContainers/0/env" in _paths(mutation(obj, "req", "hourglass"))


def test_a_name_matching_no_container_denies_the_pod_with_the_reason() -> None:
    obj = _kai_init_container_pod()
    obj["metadata"]["annotations"]["gpu-fraction-container-name"] = "nope"
    with pytest.raises(MutationRefused, match="'nope' names no container"):
        mutation(obj, "req", "hourglass")
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "object": obj},
    }
    answer = review(body, "hourglass")["response"]
    assert answer["allowed"] is False and "gpu-fraction-container-name" in answer["status"]["message"]


@pytest.mark.parametrize(
    ("configured", "spec", "expect"),
    [
        (None, {}, None),  # not configured: pods unchanged
        ("", {}, None),  # KAI: an empty gpuPodRuntimeClassName disables the injection
        ("nvidia", {}, "nvidia"),
        ("nvidia", {"runtimeClassName": "custom"}, None),  # the pod's own class is kept
    ],
    ids=["unset", "empty", "injected", "pods-own-kept"],
)
def test_runtime_class_is_injected_on_fractional_pods_only_when_configured(
    configured: str | None, spec: dict[str, Any], expect: str | None
) -> None:
    ops = _paths(mutation(_kai_init_container_pod(**spec), "req", "hourglass", configured))
    assert ops.get("/spec/runtimeClassName") == expect


def test_runtime_class_is_never_set_on_a_pod_the_webhook_does_not_wire() -> None:
    whole = _kai_init_container_pod()
    whole["metadata"]["annotations"] = {}
    assert mutation(whole, "req", "hourglass", "nvidia") == []
    body = {
        "request": {"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "object": whole},
    }
    assert "patch" not in review(body, "hourglass", "nvidia")["response"]
    sharing = {**body, "request": {**body["request"], "object": _kai_init_container_pod()}}
    patch = json.loads(base64.b64decode(review(sharing, "hourglass", "nvidia")["response"]["patch"]))
    assert {"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia"} in patch
