"""KAI's metrics served by the binder and the fairshare service (``--metrics-port`` of ``bind`` and
``fairshare``): ``kai_task_bind_latency_milliseconds`` and ``kai_usage_query_latency_milliseconds``, in KAI's
buckets and whole milliseconds, scraped over real HTTP. The binder binds on the project's real kube-apiserver;
the fairshare command runs as a real process.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fairshare.config import FairshareConfig
from fairshare.metrics import KAI_LATENCY_BUCKETS_MS, FairshareMetrics, KaiLatencyHistogram, serve_registry
from fairshare.service import FairshareService
from ingest.filelog import FileLog
from ingest.log import DEFAULT_TOPICS
from scheduler.kube.binder import Binder, BinderApi
from scheduler.metrics import BinderMetrics, serve
from tests.support.cycle_records import bind, record
from tests.support.fairshare_inputs import FlakySource, append_events, one_pod_cluster
from tests.support.kube_objects import FAST, apply_crds, make_node, make_pod, make_queue
from tests.support.paths import REPO_ROOT

S = 1000

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(url: str) -> tuple[Samples, dict[str, str], str]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    samples: Samples = {}
    types = {}
    for fam in text_string_to_metric_families(text):
        types[fam.name] = fam.type
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, types, text


def _buckets(samples: Samples, name: str) -> dict[str, float]:
    return {
        le: samples[(f"{name}_bucket", (("le", le),))]
        for le in [str(int(b)) for b in KAI_LATENCY_BUCKETS_MS] + ["+Inf"]
    }


def _ticks(*values: float) -> Any:
    it = iter(values)
    return lambda: next(it)


# --------------------------------------------------------------------------- the histogram


@pytest.mark.parametrize(
    ("seconds", "first_bucket"),
    [
        (0.0, "5"),  # 0 ms
        (0.0059, "5"),  # 5.9 ms -> 5 ms (truncated, as Go's Duration.Milliseconds)
        (0.0061, "10"),  # 6 ms
        (2.5609, "2560"),  # 2560 ms
        (2.561, "+Inf"),  # 2561 ms: past KAI's last bucket
    ],
)
def test_kai_histogram_truncates_to_whole_ms_in_kais_buckets(seconds: float, first_bucket: str) -> None:
    h = KaiLatencyHistogram("kai_x_milliseconds", "x")
    h.observe_seconds(seconds)
    reg = FairshareMetrics.create().registry
    reg.register(h)
    with serve_registry(reg) as ep:
        samples, types, text = _scrape(ep.url)
    got = _buckets(samples, "kai_x_milliseconds")
    order = list(got)
    assert next(le for le in order if got[le] == 1.0) == first_bucket
    assert samples[("kai_x_milliseconds_count", ())] == 1.0
    assert samples[("kai_x_milliseconds_sum", ())] == float(int(seconds * 1000))
    assert types["kai_x_milliseconds"] == "histogram" and 'le="2560"' in text


def test_kai_histogram_refuses_a_negative_latency() -> None:
    with pytest.raises(ValueError, match="negative latency"):
        KaiLatencyHistogram("kai_x_milliseconds", "x").observe_ms(-1)


# --------------------------------------------------------------------------- the binder


@pytest.fixture
def api(kube_api: Any) -> Iterator[Any]:
    with kube_api.api_client() as client_:
        apply_crds(client_)
        yield client_


def test_the_binder_times_each_bind_as_kais_task_bind_latency(
    api: Any, kube_namespace: str, tmp_path: Path
) -> None:
    """Two pods bound (7 ms and 30 ms by the injected timer) and one whose pod is gone (404, 3000 ms): KAI
    times every bind, failed ones too."""
    ns = kube_namespace
    node, qa = f"{ns}-n1", f"{ns}-team-a"
    make_node(api, node)
    make_queue(api, qa)
    for p in ("p1", "p2"):
        make_pod(api, ns, p, queue=qa)
    log = FileLog(tmp_path / "log")
    rec = record([bind(f"{ns}/p1", node), bind(f"{ns}/p2", node), bind(f"{ns}/gone", node)])
    log.append(DEFAULT_TOPICS.decisions, b"c1", rec.dumps())
    metrics = BinderMetrics.create()
    timer = _ticks(0.0, 0.0079, 1.0, 1.030, 2.0, 5.0)
    b = Binder(log, BinderApi(api), grace_seconds=0, retry=FAST, metrics=metrics, timer=timer)
    st = b.run(stop_when_idle=True)
    assert (st.bound, st.already_gone) == (2, 1)
    with serve(metrics) as ep:
        samples, types, _ = _scrape(ep.url)
    name = "kai_task_bind_latency_milliseconds"
    assert types[name] == "histogram"
    got = _buckets(samples, name)
    assert (got["5"], got["10"], got["20"], got["40"], got["2560"], got["+Inf"]) == (0, 1, 1, 2, 2, 3)
    assert samples[(f"{name}_sum", ())] == 7 + 30 + 3000


def test_the_bind_command_refuses_a_metrics_port_in_use(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    )
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "analytics.cli", "bind", "--log", str(tmp_path / "log"), "--kubeconfig",
             str(kubeconfig), "--metrics-port", str(port), "--stop-when-idle"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert f"bind: cannot serve metrics on 127.0.0.1:{port}" in out.stderr


# --------------------------------------------------------------------------- the fairshare service


def test_fairshare_times_each_usage_query_that_answered(tmp_path: Path) -> None:
    """A query that answered (12 ms) is observed; one that failed is not (KAI observes successful fetches)."""
    cfg = FairshareConfig(window_s=600, staleness_s=120, refresh_s=30)
    now = [1000 * S]
    src = FlakySource()
    metrics = FairshareMetrics.create()
    with FileLog(tmp_path / "log") as log:
        svc = FairshareService(
            log,
            cfg,
            source_name="prometheus",
            source=src,
            clock_ms=lambda: now[0],
            metrics=metrics,
            timer=_ticks(0.0, 0.012, 5.0),
        )
        assert svc.step() is not None
        src.down = "connection refused by 127.0.0.1:9"
        now[0] = 1200 * S
        svc.step()  # failed: timed by nobody
    with serve_registry(metrics.registry) as ep:
        samples, types, _ = _scrape(ep.url)
    name = "kai_usage_query_latency_milliseconds"
    assert types[name] == "histogram"
    got = _buckets(samples, name)
    assert (got["10"], got["20"], got["+Inf"]) == (0, 1, 1)
    assert samples[(f"{name}_sum", ())] == 12.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_fairshare_command_serves_kais_usage_query_latency(tmp_path: Path) -> None:
    """``hourglass fairshare --metrics-port`` as a real process: its endpoint shows each computation."""
    with FileLog(tmp_path / "log") as log:
        append_events(log, one_pod_cluster())
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "analytics.cli", "fairshare", "--log", str(tmp_path / "log"),
         "--interval", "0.2", "--metrics-port", str(port)],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                samples, _, _ = _scrape(f"http://127.0.0.1:{port}")
                if samples.get(("kai_usage_query_latency_milliseconds_count", ()), 0.0) >= 1.0:
                    break
            except OSError:
                pass
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "no usage query observed in 60 s"
            time.sleep(0.2)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert f"metrics on http://127.0.0.1:{port}" in err
