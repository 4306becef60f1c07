"""Binder benchmark against a real kube-apiserver: N independent binds, sequential vs parallel workers.

Starts ``tools/kube/apiserver.sh`` in a temp dir (or uses ``--kubeconfig``), creates one node and N pending
pods per run, writes one cycle record of N Binds and times ``Binder.run`` until it is committed. One line per
worker count: ``bench: binder pods=200 workers=8 pods_per_s=P seconds=S``.

    python benchmarks/bench_binder.py [--pods 200] [--workers 1,8] [--kubeconfig FILE]
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from scheduler.kube.binder import Binder, BinderApi
from tests.support.cycle_records import bind, record
from tests.support.kube_objects import FAST, make_node, make_pod
from tests.support.paths import REPO_ROOT

APISERVER_SH = REPO_ROOT / "tools" / "kube" / "apiserver.sh"


def _client(kubeconfig: Path) -> Any:
    from kubernetes import config

    load: Any = config.new_client_from_config_dict
    return load(yaml.safe_load(kubeconfig.read_text()), persist_config=False)


def run(kubeconfig: Path, pods: int, workers: int, work: Path) -> float:
    """Bind ``pods`` fresh pods with ``workers`` workers; print the figure, return pods per second."""
    from kubernetes import client

    api = _client(kubeconfig)
    ns = f"bench-{uuid.uuid4().hex[:8]}"
    body: Any = {"metadata": {"name": ns}}
    client.CoreV1Api(api).create_namespace(body)
    node = f"{ns}-n1"
    make_node(api, node, gpus=pods)
    for i in range(pods):
        make_pod(api, ns, f"p{i}", gpus=1)
    log = FileLog(work / ns)
    log.append(
        DEFAULT_TOPICS.decisions,
        None,
        record([bind(f"{ns}/p{i}", node, (i,), 1000) for i in range(pods)]).dumps(),
    )
    binder_api = BinderApi(api)
    kwargs: dict[str, Any] = {}
    if workers > 1:
        BinderApi.size_pool(api, workers)
        kwargs["workers"] = workers
    binder = Binder(log, binder_api, retry=FAST, **kwargs)
    t0 = time.perf_counter()
    st = binder.run(stop_when_idle=True)
    dt = time.perf_counter() - t0
    assert st.bound == pods, st
    rate = pods / dt
    print(f"bench: binder pods={pods} workers={workers} pods_per_s={rate:.0f} seconds={dt:.3f}", flush=True)
    return rate


def main() -> None:
    """Parse the arguments, start the API server if needed, run each worker count once."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=200)
    ap.add_argument("--workers", default="1,8")
    ap.add_argument("--kubeconfig", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        kubeconfig = args.kubeconfig
        started = None
        if kubeconfig is None:
            started = work / "apiserver"
            subprocess.run([str(APISERVER_SH), "start", str(started)], check=True, capture_output=True)
            kubeconfig = started / "kubeconfig"
        try:
            for w in (int(x) for x in args.workers.split(",")):
                run(kubeconfig, args.pods, w, work)
        finally:
            if started is not None:
                subprocess.run([str(APISERVER_SH), "stop", str(started)], check=False, capture_output=True)


if __name__ == "__main__":
    main()
