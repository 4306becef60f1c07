"""A burst of bare pods against a real kube-apiserver: their PodGroups are created side by side, and the
log is what one call at a time writes (same events, same order), with every error path kept per pod."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest.events import parse_event
from ingest.filelog import FileLog
from ingest.kube.client import KubeApi, KubeError
from ingest.kube.watcher import KubeIngest
from ingest.log import DEFAULT_TOPICS
from tests.support.kube_objects import apply_crds
from tests.support.kubeapi import KubeAPI

PODS = 12


class _SlowPodGroupPosts(KubeApi):
    """A KubeApi whose PodGroup creations each take 0.1 s and are counted while in flight; ``refuse`` maps a
    pod name to the status its PodGroup's first POST answers."""

    def __init__(self, client: Any, refuse: dict[str, int] | None = None) -> None:
        super().__init__(client)
        self.refuse = dict(refuse or {})
        self.inflight = 0
        self.most_inflight = 0
        self._lock = threading.Lock()

    def request(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        if not (method == "POST" and path.endswith("/podgroups")):
            return super().request(method, path, query, body, content_type)
        pod = next((p for p in list(self.refuse) if body["metadata"]["name"].startswith(f"pg-{p}-")), None)
        if pod is not None:
            raise KubeError(self.refuse.pop(pod), "refused by the test")
        with self._lock:
            self.inflight += 1
            self.most_inflight = max(self.most_inflight, self.inflight)
        try:
            time.sleep(0.1)
            return super().request(method, path, query, body, content_type)
        finally:
            with self._lock:
                self.inflight -= 1


@pytest.fixture
def client(kube_api: KubeAPI) -> Iterator[Any]:
    with kube_api.api_client() as api:
        apply_crds(api)
        yield api


def _make_pods(api: KubeApi, ns: str) -> list[str]:
    names = [f"p-{i}" for i in range(PODS)]
    for name in names:
        api.request(
            "POST",
            f"/api/v1/namespaces/{ns}/pods",
            body={
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {
                    "schedulerName": "hourglass",
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            },
        )
    return names


def _ns_events(log: FileLog, ns: str) -> list[Any]:
    """This namespace's events, ``at_ms`` (wall clock) left out."""
    events = [parse_event(r.value) for r in log.read(DEFAULT_TOPICS.events, 0, 1_000_000)]
    return [e.model_copy(update={"at_ms": 0}) for e in events if getattr(e, "namespace", None) == ns]


def _same_but_new(events: list[Any]) -> list[Any]:
    """Events without what a re-created PodGroup changes (its object uid and creation time)."""
    return [
        e.model_copy(update={"k8s_uid": None, "created_at_ms": 0}) if e.type == "PodGroupUpserted" else e
        for e in events
    ]


def _ingest(api: KubeApi, log: FileLog, ns: str, **kw: Any) -> KubeIngest:
    return KubeIngest(api, log, namespace=ns, watch_timeout_s=5, **kw)


def test_a_burst_of_bare_pods_gets_its_podgroups_side_by_side_and_the_log_of_one_call_at_a_time(
    client: Any, kube_namespace: str, tmp_path: Path
) -> None:
    ns = kube_namespace
    names = _make_pods(KubeApi(client), ns)
    api = _SlowPodGroupPosts(client)
    with FileLog(tmp_path / "burst") as log:
        ingest = _ingest(api, log, ns)
        ingest.start(watch=False)  # the first list holds the whole burst: one batch
        ingest.stop()
        burst = _ns_events(log, ns)
    assert api.most_inflight >= 2, "the PodGroups of one batch were created one after the other"
    assert ingest.stats.podgroups_created == PODS

    types = [(e.type, e.name) for e in burst]
    submitted = {e.name: e for e in burst if e.type == "PodSubmitted"}
    assert sorted(submitted) == sorted(names)
    for name, ev in submitted.items():
        assert ev.pod_group.startswith(f"pg-{name}-")
        # The PodGroup's upsert goes to the log before the pod that joins it, as the fold expects.
        assert types.index(("PodGroupUpserted", ev.pod_group)) < types.index(("PodSubmitted", name))

    # The same pods read by an ingest that creates one PodGroup at a time (the PodGroups deleted first, so
    # it creates them again) write the same events in the same order: only the new objects' uid and
    # creation time differ.
    KubeApi(client).request("DELETE", f"/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups")
    with FileLog(tmp_path / "one-by-one") as log:
        single = _ingest(KubeApi(client), log, ns, grouping_workers=1)
        single.start(watch=False)
        single.stop()
        assert single.stats.podgroups_created == PODS
        assert _same_but_new(_ns_events(log, ns)) == _same_but_new(burst)


def test_a_refused_podgroup_in_a_burst_is_retried_or_dead_lettered_for_its_pod_alone(
    client: Any, kube_namespace: str, tmp_path: Path
) -> None:
    ns = kube_namespace
    _make_pods(KubeApi(client), ns)
    # p-3's PodGroup: a 500 (transient: the pod is looked at again); p-5's: a 403 (permanent: dead letter).
    api = _SlowPodGroupPosts(client, refuse={"p-3": 500, "p-5": 403})
    with FileLog(tmp_path / "log") as log:
        ingest = _ingest(api, log, ns)
        ingest.start(watch=False)
        first = {e.name for e in _ns_events(log, ns) if e.type == "PodSubmitted"}
        assert first == {f"p-{i}" for i in range(PODS)} - {"p-3", "p-5"}
        assert f"{ns}/p-3" in ingest._retry
        dead = [r.value.decode() for r in log.read(DEFAULT_TOPICS.deadletter, 0, 100)]
        assert len(dead) == 1 and "p-5" in dead[0] and "cannot create its PodGroup: 403" in dead[0]

        time.sleep(2.1)  # the retry of p-3 falls due
        ingest.step(0.1)
        ingest.stop()
        after = [e.name for e in _ns_events(log, ns) if e.type == "PodSubmitted"]
    assert sorted(after) == sorted(first | {"p-3"}), "p-3 submitted once, after its retry"
