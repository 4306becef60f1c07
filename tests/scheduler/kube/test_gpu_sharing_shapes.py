"""GPU sharing without a server: what the webhook patches, what the binder writes, how things are named.

Table-driven: each row is one pod a user might create and the wiring they would see; bad AdmissionReview
bodies get a clear 400, never a crash. The API-server behaviour is in ``tests/scheduler/kube/test_gpu_sharing.py``.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from scheduler.kube.reservation import (
    SharingConfig,
    gpu_group,
    reservation_pod,
    reservation_pod_name,
    visibility_data,
)
from scheduler.kube.webhook import MUTATE_PATH, configmap_name, mutation, review, serve

KEYS = ["NVIDIA_VISIBLE_DEVICES", "GPU_PORTION", "RUNAI_NUM_OF_GPUS"]


def apply_patch(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 ``add`` (the only op the webhook sends), on a deep copy."""
    out: dict[str, Any] = json.loads(json.dumps(obj))
    for op in ops:
        assert op["op"] == "add", op
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node: Any = out
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node.insert(int(last), op["value"])
        else:
            node[last] = op["value"]
    return out


def pod(
    annotations: dict[str, str] | None = None,
    scheduler: str = "hourglass",
    containers: tuple[str, ...] = ("main",),
    env: list[dict[str, Any]] | None = None,
    name: str | None = "p",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name} if name else {"generateName": "job-"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {
        "metadata": meta,
        "spec": {
            "schedulerName": scheduler,
            "containers": [
                {"name": c, **({"env": list(env)} if env and i == 0 else {})}
                for i, c in enumerate(containers)
            ],
        },
    }


#: (case, pod, index of the wired container or None when the pod must be left alone)
CASES: list[tuple[str, dict[str, Any], int | None]] = [
    ("fraction", pod({"gpu-fraction": "0.5"}), 0),
    ("memory", pod({"gpu-memory": "4000"}), 0),
    ("named container", pod({"gpu-fraction": "0.5", "gpu-fraction-container-name": "b"}, containers=("a", "b")), 1),
    ("generateName", pod({"gpu-fraction": "0.25"}, name=None), 0),
    ("whole GPU pod", pod({}), None),
    ("no annotations", pod(None), None),
    ("another scheduler", pod({"gpu-fraction": "0.5"}, scheduler="kai-scheduler"), None),
    ("already wired", pod({"gpu-fraction": "0.5", "hourglass.io/gpu-configmap": "x"}), None),
    ("user's own variable replaced", pod({"gpu-fraction": "0.5"}, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}, {"name": "K", "value": "v"}]), 0),
]  # fmt: skip


@pytest.mark.parametrize(("case", "obj", "wired"), CASES, ids=[c[0] for c in CASES])
def test_webhook_wires_exactly_the_sharing_container(
    case: str, obj: dict[str, Any], wired: int | None
) -> None:
    ops = mutation(obj, "req-1", "hourglass")
    if wired is None:
        assert ops == []
        return
    out = apply_patch(obj, ops)
    cm = out["metadata"]["annotations"]["hourglass.io/gpu-configmap"]
    assert cm == configmap_name(obj, "req-1") and cm.endswith("-gpu")
    for i, c in enumerate(out["spec"]["containers"]):
        refs = {e["name"]: e.get("valueFrom", {}).get("configMapKeyRef") for e in c.get("env") or []}
        if i != wired:
            assert not set(KEYS) & set(refs)
            continue
        assert {k: refs[k] for k in KEYS} == {k: {"name": cm, "key": k, "optional": False} for k in KEYS}
        assert [e["name"] for e in c["env"]].count("NVIDIA_VISIBLE_DEVICES") == 1  # the user's "all" is gone
    assert {k: v for k, v in out["metadata"]["annotations"].items() if k != "hourglass.io/gpu-configmap"} == (
        obj["metadata"].get("annotations") or {}
    )


def test_configmap_names_are_per_request_and_valid() -> None:
    a, b = configmap_name(pod(name=None), "uid-1"), configmap_name(pod(name=None), "uid-2")
    assert a != b and a.startswith("job-") and len(a) <= 253
    long = configmap_name(pod(name="x" * 253), "u")
    assert len(long) <= 253


def test_review_answers_with_a_base64_json_patch_and_always_allows() -> None:
    body: dict[str, Any] = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u1",
            "kind": {"kind": "Pod"},
            "operation": "CREATE",
            "object": pod({"gpu-fraction": "0.5"}),
        },
    }
    answer = review(body, "hourglass")["response"]
    assert answer["uid"] == "u1" and answer["allowed"] is True and answer["patchType"] == "JSONPatch"
    assert (
        json.loads(base64.b64decode(answer["patch"]))[0]["path"]
        == "/metadata/annotations/hourglass.io~1gpu-configmap"
    )
    update = {**body, "request": {**body["request"], "operation": "UPDATE"}}
    assert "patch" not in review(update, "hourglass")["response"]


def test_reservation_pod_holds_one_whole_device_on_its_node() -> None:
    cfg = SharingConfig(namespace="resv", image="img:1", service_account="sa", runtime_class="nvidia")
    tol = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    p = reservation_pod(cfg, "node-a", 3, ["ns/b", "ns/a", "ns/a"], tol)
    assert (
        p["metadata"]["name"] == reservation_pod_name(gpu_group("node-a", 3))
        and p["metadata"]["namespace"] == "resv"
    )
    assert p["metadata"]["annotations"]["hourglass.io/sharers"] == "ns/a,ns/b"
    assert p["metadata"]["labels"]["hourglass.io/gpu-reservation"] == "true"
    spec = p["spec"]
    assert (spec["nodeName"], spec["serviceAccountName"], spec["runtimeClassName"], spec["tolerations"]) == (
        "node-a", "sa", "nvidia", tol,
    )  # fmt: skip
    (c,) = spec["containers"]
    assert c["resources"]["requests"]["nvidia.com/gpu"] == c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert c["command"] == ["hourglass", "reserve"]
    assert gpu_group("node-a", 3) == gpu_group("node-a", 3) != gpu_group("node-a", 4)
    assert len(gpu_group("n" * 300, 0)) <= 63


@pytest.mark.parametrize(
    ("gpus", "milli", "expected"),
    [
        (
            ["GPU-1"],
            500,
            {"NVIDIA_VISIBLE_DEVICES": "GPU-1", "GPU_PORTION": "0.5", "RUNAI_NUM_OF_GPUS": "0.5"},
        ),
        (
            ["0", "3"],
            250,
            {"NVIDIA_VISIBLE_DEVICES": "0,3", "GPU_PORTION": "0.25", "RUNAI_NUM_OF_GPUS": "0.25"},
        ),
        (
            ["GPU-2"],
            333,
            {"NVIDIA_VISIBLE_DEVICES": "GPU-2", "GPU_PORTION": "0.333", "RUNAI_NUM_OF_GPUS": "0.333"},
        ),
    ],
)
def test_visibility_data_is_kais_keys(gpus: list[str], milli: int, expected: dict[str, str]) -> None:
    assert visibility_data(gpus, milli) == expected


def test_the_https_server_answers_reviews_and_refuses_garbage(tmp_path: Path) -> None:
    key, crt = tmp_path / "k.pem", tmp_path / "c.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(crt),
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    server = serve("127.0.0.1", 0, str(crt), str(key))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ctx = ssl.create_default_context(cafile=str(crt))
    url = f"https://127.0.0.1:{server.server_address[1]}"
    try:
        with urllib.request.urlopen(f"{url}/healthz", context=ctx, timeout=5) as r:
            assert r.read() == b"ok"
        req = urllib.request.Request(
            f"{url}{MUTATE_PATH}", data=b"{not json", headers={"Content-Type": "application/json"}, method="POST"
        )
        with pytest.raises(urllib.error.HTTPError) as bad:
            urllib.request.urlopen(req, context=ctx, timeout=5)
        assert bad.value.code == 400 and b"not an AdmissionReview" in bad.value.read()
    finally:
        server.shutdown()
        server.server_close()
