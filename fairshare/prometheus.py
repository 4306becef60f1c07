"""Usage history from the cluster's Prometheus: range queries over per-queue allocation and cluster capacity.

:class:`PrometheusSource` is the production :class:`~fairshare.source.UsageSource` (kind ``"sampled"``). It
runs one PromQL range query per resource (``custom_query_range`` of prometheus-api-client) with a fixed step,
converts the answer from Prometheus base units back to engine units (GPUs x 1000 -> milli-GPU, cores x 1000
-> millicores, bytes) and returns the frames of :mod:`fairshare.source`. Each row holds for one step.

Query points sit on multiples of the step (epoch-aligned, ``ts_ms % step_ms == 0``) inside
``[start_ms, end_ms)``, so two calls over overlapping ranges sample the same instants. A long range is split
into several queries below Prometheus' limit of 11,000 points per series.

The defaults read the metrics :mod:`scheduler.metrics` exports (``hourglass_queue_allocated`` restricted to
leaf queues, ``hourglass_cluster_capacity``); ``docs/metrics.md`` shows how to point them at KAI's
``kai_queue_allocated_*`` gauges or at DCGM series instead.

Every failure (connection refused, timeout, HTTP error, a result of the wrong shape) raises
:class:`~fairshare.source.SourceUnavailable` naming the URL, the query and the reason.

A misbehaving server cannot hold or flood the service: each query has a total deadline (``deadline_s``,
retries included; a server trickling its answer is cut off there, not only a server that is silent for
``timeout_s``), and an answer larger than ``max_response_bytes`` is refused while it is read. Samples
are checked before use: a timestamp must be a finite time, a value finite, non-negative and at most
:data:`MAX_SAMPLE_VALUE` (so no conversion to engine units overflows).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import socket
import ssl
import threading
import time
import urllib.parse
from typing import Any, Final

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from fairshare.source import ALLOCATION_SCHEMA, CAPACITY_SCHEMA, RESOURCES, SourceUnavailable

__all__ = [
    "DEFAULT_ALLOCATION_QUERIES",
    "DEFAULT_CAPACITY_QUERIES",
    "DEFAULT_ENGINE_PER_UNIT",
    "MAX_SAMPLE_VALUE",
    "PROMETHEUS_MAX_POINTS",
    "PrometheusSource",
    "PrometheusSourceConfig",
]

#: Prometheus refuses range queries that would return more than this many points per series.
PROMETHEUS_MAX_POINTS: Final = 11_000
#: The largest sample accepted, in Prometheus base units (GPUs, cores, bytes): an exabyte of memory.
MAX_SAMPLE_VALUE: Final = 1e18
# A sample timestamp past this (unix seconds, the year 5138) is not a time Prometheus can hold.
_MAX_SAMPLE_TIME_S: Final = 1e11
_RETRY_STATUSES: Final = frozenset({429, 502, 503, 504})

# `sum by (queue)` merges the series of several scheduler shards (one per node pool) into one per queue;
# `and on(queue) ...{leaf="true"}` keeps leaf queues only, which is what the usage interface promises
# (parents' usage is derived from their children).
DEFAULT_ALLOCATION_QUERIES: Final[dict[str, str]] = {
    r: (
        f'sum by (queue) (hourglass_queue_allocated{{resource="{r}"}}'
        ' and on(queue) hourglass_queue_info{leaf="true"})'
    )
    for r in RESOURCES
}
DEFAULT_CAPACITY_QUERIES: Final[dict[str, str]] = {
    r: f'sum(hourglass_cluster_capacity{{resource="{r}"}})' for r in RESOURCES
}
#: Engine units per unit of the query result: GPUs -> milli-GPU, cores -> millicores, bytes -> bytes.
DEFAULT_ENGINE_PER_UNIT: Final[dict[str, float]] = {"gpu": 1000.0, "cpu": 1000.0, "memory": 1.0}


class PrometheusSourceConfig(BaseModel):
    """Where and how :class:`PrometheusSource` queries.

    Query strings may contain ``$step`` (replaced by the step as a PromQL duration, e.g. ``60s``), so an
    allocation query can average over each step (``avg_over_time(x[$step])``) instead of sampling it. A
    resource missing from ``allocation_queries`` is not queried (e.g. a DCGM-only setup gives GPUs only).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str = "http://127.0.0.1:9090"
    step_s: int = Field(
        default=60, gt=0, description="Range-query step in whole seconds; each sample holds one step"
    )
    timeout_s: float = Field(default=10.0, gt=0, description="Timeout of any one connect or read")
    deadline_s: float = Field(
        default=30.0, gt=0, le=3600, description="Total time for one query, retries included"
    )
    max_response_bytes: int = Field(
        default=64 * 1024 * 1024, gt=0, description="Largest answer read for one query"
    )
    retries: int = Field(default=2, ge=0, description="Retries on connection errors and 429/502/503/504")
    queue_label: str = Field(default="queue", min_length=1, description="Label holding the queue name")
    allocation_queries: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_ALLOCATION_QUERIES))
    capacity_queries: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_CAPACITY_QUERIES))
    engine_per_unit: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_ENGINE_PER_UNIT))
    max_points_per_query: int = Field(default=10_000, gt=0, le=PROMETHEUS_MAX_POINTS)
    headers: dict[str, str] = Field(
        default_factory=dict, description="Extra HTTP headers, e.g. Authorization"
    )

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"url must start with http:// or https://, got {v!r}")
        return v.rstrip("/")

    @field_validator("allocation_queries", "capacity_queries", "engine_per_unit")
    @classmethod
    def _resources(cls, v: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(v) - set(RESOURCES))
        if unknown:
            raise ValueError(f"unknown resource(s) {unknown}; allowed: {list(RESOURCES)}")
        for k, q in v.items():
            if isinstance(q, str) and not q.strip():
                raise ValueError(f"the query for {k!r} is empty")
            if isinstance(q, float) and not (math.isfinite(q) and q > 0):
                raise ValueError(f"engine_per_unit[{k!r}] must be a positive finite number, got {q}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> PrometheusSourceConfig:
        for r in sorted(set(self.allocation_queries) | set(self.capacity_queries)):
            if r not in self.engine_per_unit:
                raise ValueError(f"resource {r!r} is queried but has no engine_per_unit conversion")
        return self


def _empty(schema: dict[str, Any]) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


class PrometheusSource:
    """Sampled allocation and capacity history read from Prometheus range queries."""

    kind: str = "sampled"

    def __init__(self, config: PrometheusSourceConfig | None = None) -> None:
        self.config = config or PrometheusSourceConfig()
        self.step_ms: int = self.config.step_s * 1000
        self._url = urllib.parse.urlsplit(self.config.url)
        # (start, end, (ts_ms, resource) where a queue held something) of the last allocation() call: the
        # capacity() of the same range must cover those samples (the decay maths asks for both in turn).
        self._held: tuple[int, int, pl.DataFrame] | None = None

    def close(self) -> None:
        """Nothing to release: each query opens and closes its own connection."""

    # -- the UsageSource interface ------------------------------------------------------------------

    def allocation(self, start_ms: int, end_ms: int) -> pl.DataFrame:
        """Per-queue allocation in ``[start_ms, end_ms)`` (engine units); raises :class:`SourceUnavailable`."""
        frames = []
        label = self.config.queue_label
        for res in sorted(self.config.allocation_queries):
            query = self._query(self.config.allocation_queries[res])
            labels, points = self._range(query, start_ms, end_ms)
            if points.is_empty():
                continue
            for lab in labels:
                if not lab.get(label):
                    raise self._error(
                        query,
                        f"a series has no label {label!r} ({lab}); aggregate by the queue label"
                        f" (`sum by ({label}) (...)`) or set queue_label",
                    )
            names = pl.DataFrame(
                {"series": range(len(labels)), "queue": [lab[label] for lab in labels]},
                schema={"series": pl.Int64, "queue": pl.Utf8},
            )
            frame = points.join(names, on="series", how="left")
            dup = frame.filter(pl.struct("queue", "ts_ms").is_duplicated())
            if not dup.is_empty():
                raise self._error(
                    query,
                    f"two series for queue {dup['queue'][0]!r} at {dup['ts_ms'][0]} ms; aggregate them"
                    f" (`sum by ({label}) (...)`)",
                )
            frames.append(
                frame.select(
                    "ts_ms",
                    "queue",
                    pl.lit(res, pl.Utf8).alias("resource"),
                    (pl.col("value") * self.config.engine_per_unit[res]).alias("value"),
                )
            )
        out = (
            pl.concat(frames).cast(ALLOCATION_SCHEMA).sort(["queue", "resource", "ts_ms"])  # type: ignore[arg-type]
            if frames
            else _empty(ALLOCATION_SCHEMA)
        )
        self._held = (start_ms, end_ms, out.filter(pl.col("value") > 0).select("ts_ms", "resource").unique())
        return out

    def capacity(self, start_ms: int, end_ms: int) -> pl.DataFrame:
        """Cluster capacity in ``[start_ms, end_ms)`` (engine units); raises :class:`SourceUnavailable`."""
        frames = []
        for res in sorted(self.config.capacity_queries):
            query = self._query(self.config.capacity_queries[res])
            labels, points = self._range(query, start_ms, end_ms)
            if len(labels) > 1:
                raise self._error(
                    query,
                    f"the capacity query returned {len(labels)} series, expected one; wrap it in sum(...)",
                )
            frames.append(
                points.select(
                    "ts_ms",
                    pl.lit(res, pl.Utf8).alias("resource"),
                    (pl.col("value") * self.config.engine_per_unit[res]).alias("value"),
                )
            )
        out = (
            pl.concat(frames).cast(CAPACITY_SCHEMA).sort(["resource", "ts_ms"])  # type: ignore[arg-type]
            if frames
            else _empty(CAPACITY_SCHEMA)
        )
        if self._held is not None and self._held[:2] == (start_ms, end_ms):
            self._check_covers(self._held[2], out)
        return out

    def _check_covers(self, held: pl.DataFrame, capacity: pl.DataFrame) -> None:
        """SourceUnavailable when a queue held a resource at a step where the capacity has no sample.

        The missing capacity would count as zero there and inflate every queue's share of the cluster: a
        gap in the capacity series is missing data, not an empty cluster.
        """
        missing = held.join(capacity.select("ts_ms", "resource"), on=["ts_ms", "resource"], how="anti")
        if not missing.is_empty():
            first = missing.sort("ts_ms").row(0, named=True)
            raise SourceUnavailable(
                f"Prometheus at {self.config.url}: the capacity series has no {first['resource']} sample at"
                f" {first['ts_ms']} ms (and {missing.height - 1} more) where queues held"
                f" {first['resource']}: a gap in the capacity data"
            )

    # -- querying -----------------------------------------------------------------------------------

    def _query(self, template: str) -> str:
        return template.replace("$step", f"{self.config.step_s}s")

    def _error(self, query: str, why: str) -> SourceUnavailable:
        return SourceUnavailable(f"Prometheus at {self.config.url}: query {query!r}: {why}")

    def _range(self, query: str, start_ms: int, end_ms: int) -> tuple[list[dict[str, str]], pl.DataFrame]:
        """All series of ``query`` on the step grid in ``[start_ms, end_ms)``, in chunks below the points limit.

        Returns the distinct label sets (sorted) and one frame ``series`` (index into them), ``ts_ms``,
        ``value`` (as returned, finite).
        """
        step = self.step_ms
        first = -(-start_ms // step) * step  # ceil to the step grid
        n = -(-(end_ms - first) // step) if end_ms > first else 0
        per = self.config.max_points_per_query
        index: dict[tuple[tuple[str, str], ...], int] = {}
        parts: list[pl.DataFrame] = []
        for k0 in range(0, n, per):
            lo = first + k0 * step
            hi = first + (min(k0 + per, n) - 1) * step
            for labels, frame in self._query_range(query, lo, hi):
                sid = index.setdefault(tuple(sorted(labels.items())), len(index))
                parts.append(frame.with_columns(pl.lit(sid, pl.Int64).alias("series")))
        if not parts:
            return [], pl.DataFrame(schema={"series": pl.Int64, "ts_ms": pl.Int64, "value": pl.Float64})
        points = (
            pl.concat(parts)
            .select("series", "ts_ms", "value")
            .filter((pl.col("ts_ms") >= start_ms) & (pl.col("ts_ms") < end_ms))
        )
        # Renumber the series in sorted label order so results never depend on the server's series order.
        keys = sorted(index)
        renumber = pl.DataFrame(
            {"series": [index[k] for k in keys], "sorted": range(len(keys))},
            schema={"series": pl.Int64, "sorted": pl.Int64},
        )
        points = (
            points.join(renumber, on="series", how="left")
            .select(pl.col("sorted").alias("series"), "ts_ms", "value")
            .sort(["series", "ts_ms"])
        )
        present = set(points["series"].unique().to_list())
        # A series with no point inside the range (only outside, e.g. in the chunk end) is not a series.
        kept = [i for i in range(len(keys)) if i in present]
        if len(kept) != len(keys):
            remap = pl.DataFrame(
                {"series": kept, "new": range(len(kept))}, schema={"series": pl.Int64, "new": pl.Int64}
            )
            points = points.join(remap, on="series", how="left").select(
                pl.col("new").alias("series"), "ts_ms", "value"
            )
        return [dict(keys[i]) for i in kept], points

    def _query_range(self, query: str, lo_ms: int, hi_ms: int) -> list[tuple[dict[str, str], pl.DataFrame]]:
        """One range query from ``lo_ms`` to ``hi_ms`` inclusive (both on the step grid)."""
        params = {
            "query": query,
            "start": _seconds(lo_ms),
            "end": _seconds(hi_ms),
            "step": str(self.config.step_s),
        }
        body = self._get(query, "/api/v1/query_range", params)
        try:
            answer = json.loads(body)
        except RecursionError:
            raise self._error(query, "malformed response (JSON nested too deeply)") from None
        except ValueError as exc:
            raise self._error(query, f"malformed response (not JSON: {_short(str(exc))})") from None
        try:
            result = answer["data"]["result"]
        except (KeyError, TypeError):
            raise self._error(
                query, f"malformed response: no data.result in {_short(body[:300].decode(errors='replace'))}"
            ) from None
        return self._parse(query, result)

    def _get(self, query: str, path: str, params: dict[str, str]) -> bytes:
        """The body of a 200 answer to GET ``path``, within the deadline and the size cap, with retries."""
        deadline = time.monotonic() + self.config.deadline_s
        attempt = 0
        while True:
            status, body, why = self._get_once(query, path, params, deadline)
            if status == 200:
                return body
            retryable = status in _RETRY_STATUSES or status == 0
            wait = 0.5 * 2**attempt
            if not retryable or attempt >= self.config.retries or time.monotonic() + wait >= deadline:
                if status == 0:
                    raise self._error(query, why)
                raise self._error(query, f"HTTP error: HTTP Status Code {status} ({_short(repr(body))})")
            attempt += 1
            time.sleep(wait)

    def _get_once(
        self, query: str, path: str, params: dict[str, str], deadline: float
    ) -> tuple[int, bytes, str]:
        """One attempt: (HTTP status, body, "") or (0, b"", why) for a connection that failed."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise self._error(query, f"no answer within the {self.config.deadline_s} s deadline")
        u = self._url
        timeout = min(self.config.timeout_s, remaining)
        conn: http.client.HTTPConnection
        if u.scheme == "https":
            conn = http.client.HTTPSConnection(
                u.hostname or "", u.port, timeout=timeout, context=ssl.create_default_context()
            )
        else:
            conn = http.client.HTTPConnection(u.hostname or "", u.port, timeout=timeout)
        expired = threading.Event()

        def expire() -> None:
            # A per-read timeout never fires while the server trickles bytes: end the socket at the deadline.
            expired.set()
            sock = conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

        timer = threading.Timer(remaining, expire)
        timer.daemon = True
        timer.start()
        cap = self.config.max_response_bytes
        late = f"no complete answer within the {self.config.deadline_s} s deadline"
        try:
            target = (u.path or "") + path + "?" + urllib.parse.urlencode(params)
            conn.request("GET", target, headers={"Accept": "application/json", **self.config.headers})
            resp = conn.getresponse()
            declared = resp.getheader("Content-Length")
            if declared is not None and declared.isdigit() and int(declared) > cap:
                raise self._error(query, f"the answer of {declared} bytes exceeds max_response_bytes ({cap})")
            chunks: list[bytes] = []
            size = 0
            while chunk := resp.read(1 << 16):
                size += len(chunk)
                if size > cap:
                    raise self._error(query, f"the answer exceeds max_response_bytes ({cap})")
                chunks.append(chunk)
            if expired.is_set():
                raise self._error(query, late)
            return resp.status, b"".join(chunks), ""
        except TimeoutError:
            if expired.is_set():
                raise self._error(query, late) from None
            raise self._error(query, f"timed out after {self.config.timeout_s} s") from None
        except (OSError, http.client.HTTPException) as exc:
            if expired.is_set():
                raise self._error(query, late) from None
            if isinstance(exc, OSError) and conn.sock is None:
                return 0, b"", f"cannot connect ({exc})"
            return 0, b"", f"request failed ({type(exc).__name__}: {_short(str(exc))})"
        finally:
            timer.cancel()
            conn.close()

    def _parse(self, query: str, result: object) -> list[tuple[dict[str, str], pl.DataFrame]]:
        """A matrix result -> (labels, frame ts_ms / value) per series; the samples are parsed by polars."""
        if not isinstance(result, list):
            raise self._error(
                query, f"malformed result: expected a matrix (list), got {type(result).__name__}"
            )
        out = []
        for series in result:
            if not isinstance(series, dict) or not isinstance(series.get("values"), list):
                raise self._error(
                    query, f"malformed result: a series without 'values': {_short(repr(series))}"
                )
            labels = series.get("metric", {})
            if not isinstance(labels, dict):
                raise self._error(
                    query, f"malformed result: 'metric' is not an object: {_short(repr(labels))}"
                )
            labels = {str(k): str(v) for k, v in labels.items()}
            values = series["values"]
            try:
                raw = pl.DataFrame(values, orient="row", schema={"t": pl.Float64, "raw": pl.Utf8})
            except (pl.exceptions.PolarsError, TypeError, ValueError) as exc:
                raise self._error(
                    query, f"malformed samples in {labels}: {_short(repr(values[:3]))} ({exc})"
                ) from exc
            t = pl.col("t")
            bad_t = raw.filter(t.is_null() | ~t.is_finite() | (t < 0) | (t > _MAX_SAMPLE_TIME_S))
            if not bad_t.is_empty():
                raise self._error(
                    query,
                    f"malformed timestamp {bad_t['t'][0]!r} in {labels}: not a time Prometheus can hold",
                )
            frame = raw.select(
                (t * 1000).round().cast(pl.Int64).alias("ts_ms"),
                pl.col("raw").cast(pl.Float64, strict=False).alias("value"),
                "raw",
            )
            v = pl.col("value")
            bad = frame.filter(v.is_null() | v.is_infinite() | v.is_nan() | (v < 0) | (v > MAX_SAMPLE_VALUE))
            if not bad.is_empty():
                value = bad["value"][0]
                what = (
                    "malformed"
                    if value is None
                    else "non-finite"
                    if not math.isfinite(value)
                    else "negative"
                    if value < 0
                    else f"too large (above {MAX_SAMPLE_VALUE:g})"
                )
                raise self._error(
                    query,
                    f"{what} value {bad['raw'][0]!r} at {bad['ts_ms'][0]} ms in {labels}; filter it in the query",
                )
            out.append((labels, frame.drop("raw")))
        return out


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _seconds(ms: int) -> str:
    """Unix seconds for Prometheus, exactly (no float rounding of the step grid)."""
    whole, frac = divmod(ms, 1000)
    return f"{whole}.{frac:03d}" if frac else str(whole)
