"""The fairshare service's Prometheus metrics, and KAI's millisecond latency histogram shared with the scheduler.

``hourglass fairshare --metrics-port`` serves one private registry (:class:`FairshareMetrics`) holding KAI's
``kai_usage_query_latency_milliseconds``: the time of each usage computation (querying the usage source —
the events ledger or Prometheus — and decaying the history into normalised usage), as KAI's scheduler times
each fetch of its usage database. Failed queries are not observed (KAI observes only successful fetches).

:class:`KaiLatencyHistogram` renders a histogram the way KAI's Go client does: whole milliseconds (Go's
``Duration.Milliseconds()`` truncates), KAI's buckets ``ExponentialBuckets(5, 2, 10)`` and bounds written
``le="5"`` … ``le="2560"``. The scheduler and the binder use it too (``scheduler/kai_metrics.py``); it lives
here because the fairshare package comes before the scheduler's in the import order.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import HistogramMetricFamily, Metric

__all__ = [
    "KAI_LATENCY_BUCKETS_MS",
    "FairshareMetrics",
    "KaiLatencyHistogram",
    "RegistryServer",
    "latency_registry",
    "serve_registry",
    "whole_ms",
]

#: KAI's latency histogram buckets: ``prometheus.ExponentialBuckets(5, 2, 10)``, 5 ms to 2560 ms.
KAI_LATENCY_BUCKETS_MS: tuple[float, ...] = tuple(5.0 * 2**i for i in range(10))


def whole_ms(seconds: float) -> float:
    """Whole milliseconds, truncated, as KAI's ``Duration.Milliseconds()``."""
    return float(int(seconds * 1000))


def _le(bound: float) -> str:
    """A bucket bound as Go's client writes it (``5``, ``10``, ..., ``2560``)."""
    return str(int(bound)) if bound == int(bound) else str(bound)


class KaiLatencyHistogram:
    """A label-less histogram in milliseconds with KAI's buckets; a collector (register it on a registry)."""

    def __init__(self, name: str, documentation: str) -> None:
        self.name = name
        self.documentation = documentation
        self._lock = threading.Lock()
        self._buckets = [0] * len(KAI_LATENCY_BUCKETS_MS)
        self._count = 0
        self._sum = 0.0

    def observe_ms(self, ms: float) -> None:
        """Count one observation of ``ms`` milliseconds."""
        if ms < 0:
            raise ValueError(f"{self.name}: negative latency {ms} ms")
        with self._lock:
            self._count += 1
            self._sum += ms
            for i, bound in enumerate(KAI_LATENCY_BUCKETS_MS):
                if ms <= bound:
                    self._buckets[i] += 1

    def observe_seconds(self, seconds: float) -> None:
        """Count one observation of a duration in seconds, truncated to whole milliseconds as KAI does."""
        self.observe_ms(whole_ms(max(seconds, 0.0)))

    def collect(self) -> Iterator[Metric]:
        """The histogram family (cumulative buckets, ``+Inf``, count and sum)."""
        with self._lock:
            buckets, count, total = list(self._buckets), self._count, self._sum
        hist = HistogramMetricFamily(self.name, self.documentation)
        hist.add_metric(
            [],
            [(_le(b), float(n)) for b, n in zip(KAI_LATENCY_BUCKETS_MS, buckets, strict=True)]
            + [("+Inf", float(count))],
            total,
        )
        yield hist


def latency_registry(name: str, documentation: str) -> tuple[CollectorRegistry, KaiLatencyHistogram]:
    """A fresh private registry holding one :class:`KaiLatencyHistogram` named ``name``.

    What a process that exports a single KAI latency histogram serves on ``/metrics``: the fairshare
    service (:class:`FairshareMetrics`) and the binder (``scheduler.metrics.BinderMetrics``).
    """
    reg = CollectorRegistry(auto_describe=True)
    hist = KaiLatencyHistogram(name, documentation)
    reg.register(hist)
    return reg, hist


@dataclass(eq=False)
class FairshareMetrics:
    """The fairshare service's metrics on a private registry. Create with :meth:`create`."""

    registry: CollectorRegistry
    usage_query_latency: KaiLatencyHistogram

    @classmethod
    def create(cls) -> FairshareMetrics:
        """A fresh registry with ``kai_usage_query_latency_milliseconds`` registered."""
        reg, hist = latency_registry(
            "kai_usage_query_latency_milliseconds", "Usage database query latency histogram in milliseconds"
        )
        return cls(registry=reg, usage_query_latency=hist)


@dataclass(eq=False)
class RegistryServer:
    """A running ``/metrics`` endpoint for one registry; :meth:`close` stops it and frees the port."""

    host: str
    port: int
    _server: WSGIServer = field(repr=False)
    _thread: threading.Thread = field(repr=False)

    @property
    def url(self) -> str:
        """Base URL of the endpoint (append ``/metrics``)."""
        return f"http://{self.host}:{self.port}"

    def close(self) -> None:
        """Stop serving and release the socket; idempotent."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=10)
        self._server.server_close()

    def __enter__(self) -> RegistryServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_registry(registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0) -> RegistryServer:
    """Serve ``registry`` over HTTP on ``host:port`` (port 0 picks a free port) in a daemon thread."""
    server, thread = start_http_server(port, addr=host, registry=registry)
    return RegistryServer(host=host, port=int(server.server_port), _server=server, _thread=thread)
