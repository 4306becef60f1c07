"""KAI's GPU-sharing examples (docs/gpu-sharing/) on a KWOK cluster through ``hourglass ingest``, ``run``
and ``bind`` processes, only ``schedulerName`` changed.

The fractional pods (``gpu-fraction: "0.5"`` in gpu-sharing.yaml, gpu-sharing-non-default-container.yaml,
gpu-sharing-init-container.yaml, mps/gpu-sharing-with-mps.yaml; ``gpu-memory: "2000"`` MiB in
gpu-memory.yaml) must run on a fake node with the device and portion the scheduler chose in their
annotations, and no device over-committed. The binder runs without ``--gpu-sharing`` here: reservation pods
learn their GPU from the NVIDIA device plugin inside a real container, which KWOK nodes do not have (the
device wiring is covered on a real API server by tests/e2e/test_kai_workload_sharing.py; docs/kwok.md).
gpu-sharing.yaml and gpu-memory.yaml name the same pod (``gpu-sharing``), so they run one after the other,
as KAI's docs apply them.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from ingest.filelog import FileLog
from ingest.kube.names import ANNOTATION_GPU_DEVICES, ANNOTATION_GPU_PORTION
from ingest.log import DEFAULT_TOPICS
from tests.support.kai_docs import kai_example
from tests.support.kai_workload import apply_queue
from tests.support.kube_pipeline import decision_records
from tests.support.kwok import HourglassStack, KwokCluster, create_objects, pods, running, wait_until

FRACTION_EXAMPLES = {
    "gpu-sharing/gpu-sharing.yaml": "gpu-sharing",
    "gpu-sharing/gpu-sharing-non-default-container.yaml": "gpu-sharing-non-default",
    "gpu-sharing/gpu-sharing-init-container.yaml": "gpu-sharing-init-container",
    "gpu-sharing/mps/gpu-sharing-with-mps.yaml": "gpu-sharing-with-mps",
}


def test_kai_gpu_sharing_examples_run_on_shared_devices(
    kwok_cluster: KwokCluster, kwok_namespace: str, tmp_path: Path
) -> None:
    from kubernetes import client

    ns = kwok_namespace
    log_dir = tmp_path / "log"
    with kwok_cluster.api_client() as api, HourglassStack(kwok_cluster, log_dir) as stack:
        core = client.CoreV1Api(api)
        for q in kai_example("quickstart/default-queues.yaml"):
            apply_queue(api, q)
        for path in FRACTION_EXAMPLES:
            create_objects(api, kai_example(path), ns)
        names = list(FRACTION_EXAMPLES.values())
        wait_until(lambda: running(api, ns, names) or not stack.alive(), 90, "the gpu-fraction pods Running")
        assert stack.alive(), stack.logs()
        held: dict[tuple[str, str], int] = defaultdict(int)
        for name, pod in pods(api, ns).items():
            ann = pod.metadata.annotations or {}
            assert ann[ANNOTATION_GPU_PORTION] == "500", (name, ann)
            (device,) = ann[ANNOTATION_GPU_DEVICES].split(",")
            held[(pod.spec.node_name, device)] += 500
        assert all(v <= 1000 for v in held.values()), held
        # Half-GPU pods are packed: four halves on two devices, not four.
        assert len(held) == 2, held

        # gpu-memory.yaml: 2000 MiB of an 81920 MiB device, once gpu-sharing.yaml's pod of the same name is gone.
        core.delete_namespaced_pod("gpu-sharing", ns, grace_period_seconds=0)
        wait_until(lambda: "gpu-sharing" not in pods(api, ns), 30, "gpu-sharing deleted")
        create_objects(api, kai_example("gpu-sharing/gpu-memory.yaml"), ns)
        wait_until(
            lambda: running(api, ns, ["gpu-sharing"]) or not stack.alive(), 90, "gpu-memory pod Running"
        )
        assert stack.alive(), stack.logs()
        ann = pods(api, ns)["gpu-sharing"].metadata.annotations
        assert ann["gpu-memory"] == "2000" and ann[ANNOTATION_GPU_DEVICES], ann
        with FileLog(log_dir, readonly=True) as log:
            recs = decision_records(log)
            dead = log.read(DEFAULT_TOPICS.deadletter, 0, 100)
        binds = [
            d for r in recs for d in r["decisions"] if d["kind"] == "Bind" and d["pod"] == f"{ns}/gpu-sharing"
        ]
        assert len(binds) == 2 and 0 < binds[-1]["gpu_milli_per_device"] < 1000, binds
        assert dead == [], [r.value for r in dead]
    assert stack.stop() == {"ingest": 0, "run": 0, "bind": 0}, stack.logs()
