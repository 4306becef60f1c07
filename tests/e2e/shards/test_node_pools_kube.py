"""Two node pools, two shards, on the real kube-apiserver: ``hourglass run --node-pool a`` / ``b`` and
``hourglass bind --node-pool a`` / ``b`` as processes on one FileLog with one ``hourglass ingest``.

Each pod lands only in its pool: by its own ``kai.scheduler/node-pool`` label, or by its PodGroup's (KAI's
rule; the PodGroup's wins). A pod too big for its pool stays pending although the other pool has room; a
pod of the default pool waits for a default shard, which is not running. Each shard's records replay with
0 mismatches, and no cycle id appears in both.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from analytics.rerun.replay import load_source, replay
from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from scheduler.engine.session import SessionConfig
from tests.support.kube_objects import apply_crds, make_node, make_pod, make_queue, read_pod
from tests.support.kube_pipeline import decision_records

POOL = "kai.scheduler/node-pool"


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "analytics.cli", *args]


def test_each_pod_lands_only_in_its_pool(kube_api: Any, kube_namespace: str, tmp_path: Path) -> None:
    from kubernetes import client

    ns = kube_namespace
    sel = {"hourglass-e2e": ns}
    queue = f"{ns}-q"
    d = tmp_path / "log"
    kc = str(kube_api.kubeconfig)
    procs: dict[str, subprocess.Popen[str]] = {}
    with kube_api.api_client() as api:
        apply_crds(api)
        make_node(api, f"{ns}-a1", gpus=2, labels={**sel, POOL: "a"})
        make_node(api, f"{ns}-b1", gpus=4, labels={**sel, POOL: "b"})
        make_node(api, f"{ns}-plain", gpus=8, labels=sel)
        make_queue(api, queue, 8)
        for name, pool, gpus in (("pa-0", "a", 1), ("pa-1", "a", 1), ("pb-0", "b", 1), ("pa-big", "a", 3)):
            make_pod(api, ns, name, gpus=gpus, queue=queue, labels={POOL: pool}, node_selector=sel)
        make_pod(api, ns, "plain-0", gpus=1, queue=queue, node_selector=sel)
        # A PodGroup labelled for pool b whose pod is labelled for pool a: the PodGroup's label decides.
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "scheduling.run.ai",
            "v2alpha2",
            ns,
            "podgroups",
            {
                "apiVersion": "scheduling.run.ai/v2alpha2",
                "kind": "PodGroup",
                "metadata": {"name": "moved", "namespace": ns, "labels": {POOL: "b"}},
                "spec": {"minMember": 1, "queue": queue},
            },
        )
        make_pod(
            api,
            ns,
            "moved-0",
            gpus=1,
            queue=queue,
            labels={POOL: "a"},
            annotations={"pod-group-name": "moved"},
            node_selector=sel,
        )
        try:
            procs["ingest"] = subprocess.Popen(
                _cli("ingest", "--log", str(d), "--kubeconfig", kc, "--namespace", ns),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for pool in ("a", "b"):
                run = [
                    "run",
                    "--log",
                    str(d),
                    "--node-pool",
                    pool,
                    "--poll-interval",
                    "0.05",
                    "--period",
                    "0",
                ]
                bind = [
                    "bind",
                    "--log",
                    str(d),
                    "--node-pool",
                    pool,
                    "--kubeconfig",
                    kc,
                    "--poll-interval",
                    "0.05",
                ]
                for name, argv in ((f"run-{pool}", run), (f"bind-{pool}", bind)):
                    procs[name] = subprocess.Popen(
                        _cli(*argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                    )

            def settled() -> bool:
                bound = all(
                    "nodeName" in read_pod(api, ns, n)["spec"] for n in ("pa-0", "pa-1", "pb-0", "moved-0")
                )
                conds = read_pod(api, ns, "pa-big").get("status", {}).get("conditions") or []
                return bound and any(c["type"] == "PodScheduled" for c in conds)

            deadline = time.monotonic() + 120
            while not settled():
                dead = {n: p.returncode for n, p in procs.items() if p.poll() is not None}
                assert not dead and time.monotonic() < deadline, f"not settled; exited: {dead}"
                time.sleep(0.1)
            time.sleep(1.0)  # a few more polls: nothing else may bind
            nodes = {
                n: read_pod(api, ns, n)["spec"].get("nodeName")
                for n in ("pa-0", "pa-1", "pb-0", "moved-0", "pa-big", "plain-0")
            }
            assert nodes == {
                "pa-0": f"{ns}-a1",
                "pa-1": f"{ns}-a1",
                "pb-0": f"{ns}-b1",
                "moved-0": f"{ns}-b1",
                "pa-big": None,  # fits only pool b's or the plain node: pending, not placed outside pool a
                "plain-0": None,  # the default pool's: no default shard runs
            }
            for name in procs:
                procs[name].send_signal(signal.SIGTERM)
            for name, p in procs.items():
                _out, err = p.communicate(timeout=60)
                assert p.returncode == 0, (name, err[-2000:])
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
                    p.communicate(timeout=30)
    ids: dict[str, set[str]] = {}
    for pool in ("a", "b"):
        topics = DEFAULT_TOPICS.for_pool(pool)
        with FileLog(d, readonly=True) as log:
            records = decision_records(log, topics.decisions)
        ids[pool] = {r["cycle_id"] for r in records}
        summary = replay(load_source(d, config=SessionConfig(node_pool=pool), topics=topics), verify=True)
        assert summary.cycles == len(records) > 0 and summary.mismatches == 0
    assert not ids["a"] & ids["b"]
