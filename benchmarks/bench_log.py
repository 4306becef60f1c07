"""Event log benchmark: records appended / read per second, and events folded per second (read + parse +
fold, the scheduler service's :class:`~scheduler.service.Folder`), on the FileLog and (if reachable) Kafka.

Appends go in batches through ``append_many`` (FileLog: one write + one fsync per batch with the
default ``fsync="batch"``; Kafka: idempotent producer, acks=all, flush per batch); reads page
through the topic with ``read(topic, offset, batch)``. The fold workload is the synthetic cluster of
``--nodes`` nodes and ``--pods`` pods as contract events, with a third of the pods then bound and a tenth
of those finished and deleted. The fold is also split into
its parts (``fold_decode``: the fold's decoding, ``ingest.events.FAST_PATH`` then pydantic;
``fold_apply``: :meth:`scheduler.engine.state.StateBuilder.apply` on decoded events; ``parse_event``:
:func:`ingest.events.parse_event`, the pydantic models other readers get). Run:

    python benchmarks/bench_log.py [--records N] [--size BYTES] [--batch B] [--nodes N] [--pods N]
                                   [--kafka HOST:PORT | --no-kafka] [--fold-only]

Every figure is one line ``bench: NAME key=value ... seconds=S rate=R`` (rate = records or events / s).
``--kafka`` defaults to ``$HOURGLASS_KAFKA_BOOTSTRAP``; when neither is set the script starts a
broker with ``tools/kafka/kafka.sh start`` (port ``$HOURGLASS_KAFKA_PORT``, default 19092) and stops it
afterwards.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from ingest.events import (
    FAST_PATH,
    EventBase,
    PodBound,
    PodDeleted,
    PodFinished,
    PodSubmitted,
    dump_event,
    parse_event,
)
from ingest.filelog import FileLog, FsyncPolicy
from ingest.log import Log
from scheduler.engine.state import StateBuilder
from scheduler.service import Folder
from tests.support.synthetic import SyntheticSpec, synthetic_events

KAFKA_SH = Path(__file__).resolve().parent.parent / "tools" / "kafka" / "kafka.sh"


def report(name: str, seconds: float, count: int, **keys: object) -> None:
    """Print one ``bench:`` line; ``count`` items in ``seconds`` gives the rate."""
    fields = " ".join(f"{k}={v}" for k, v in keys.items())
    print(f"bench: {name} {fields} seconds={seconds:.3f} rate={count / seconds:.0f}", flush=True)


def bench_raw(backend: str, log: Log, records: int, size: int, batch: int, **keys: object) -> None:
    """Append ``records`` values of ``size`` bytes in batches, then page through them."""
    topic = f"bench.{uuid.uuid4().hex[:8]}"
    value = b"x" * size
    record_keys = [f"ns/pod-{i % 1000}".encode() for i in range(batch)]
    t0 = time.perf_counter()
    done = 0
    while done < records:
        n = min(batch, records - done)
        log.append_many(topic, [(record_keys[i], value) for i in range(n)])
        done += n
    t1 = time.perf_counter()
    seen = sum(1 for _ in log.scan(topic, 0, batch))
    t2 = time.perf_counter()
    assert seen == records, (seen, records)
    common = {"backend": backend, **keys, "records": records, "size": size, "batch": batch}
    report("log_append", t1 - t0, records, **common)
    report("log_read", t2 - t1, records, **common)


def bench_fold(backend: str, log: Log, events: list[bytes], batch: int) -> None:
    """Append contract events, then read them back and fold them as the service does."""
    topic = f"bench.fold.{uuid.uuid4().hex[:8]}"
    for i in range(0, len(events), batch):
        log.append_many(topic, [(None, v) for v in events[i : i + batch]])
    folder = Folder(topic)
    t0 = time.perf_counter()
    for r in log.scan(topic, 0, batch):
        if folder.feed(r) is not None:
            raise AssertionError(f"event {r.offset} was rejected")
    dt = time.perf_counter() - t0
    assert folder.folded == len(events)
    report("fold", dt, len(events), backend=backend, events=len(events), batch=batch)


def bench_parts(events: list[bytes]) -> None:
    """The fold's parts on their own: decode (bytes -> event, as the fold does: the compiled fast path,
    pydantic for what it cannot decide), apply (event -> builder), and ``parse_event`` (bytes -> pydantic
    model, what other readers use)."""
    t0 = time.perf_counter()
    decoded = [FAST_PATH.decode(v) or parse_event(v) for v in events]
    t1 = time.perf_counter()
    builder = StateBuilder()
    for e in decoded:
        builder.apply(e)
    t2 = time.perf_counter()
    for v in events:
        parse_event(v)
    t3 = time.perf_counter()
    report("fold_decode", t1 - t0, len(events), events=len(events))
    report("fold_apply", t2 - t1, len(events), events=len(events))
    report("parse_event", t3 - t2, len(events), events=len(events))


def fold_workload(nodes: int, pods: int) -> list[bytes]:
    """The synthetic cluster as contract events, then a pod lifecycle: every third pod bound, every
    tenth of those finished and deleted (so the fold sees every hot event type)."""
    spec = SyntheticSpec(nodes=nodes, pending_pods=pods, seed=1)
    events: list[EventBase] = list(synthetic_events(spec))
    submitted = [e for e in events if isinstance(e, PodSubmitted)]
    at = max(e.at_ms for e in events)
    bound = submitted[::3]
    for i, p in enumerate(bound):
        devices = list(range(min(p.requests.gpus, spec.gpus_per_node)))
        events.append(
            PodBound(
                at_ms=at + i,
                name=p.name,
                namespace=p.namespace,
                node=f"node-{i % nodes:05d}",
                gpu_devices=devices,
            )
        )
    at += len(bound)
    for i, p in enumerate(bound[::10]):
        events.append(PodFinished(at_ms=at + i, name=p.name, namespace=p.namespace, phase="Succeeded"))
        events.append(PodDeleted(at_ms=at + i, name=p.name, namespace=p.namespace))
    return [dump_event(e) for e in events]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=200, help="value size in bytes (an event is ~150-400 B)")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--nodes", type=int, default=1000, help="fold workload: synthetic nodes")
    ap.add_argument("--pods", type=int, default=50_000, help="fold workload: synthetic pods")
    ap.add_argument("--kafka", default=os.environ.get("HOURGLASS_KAFKA_BOOTSTRAP"))
    ap.add_argument("--no-kafka", action="store_true")
    ap.add_argument("--fold-only", action="store_true", help="skip the raw append / read figures")
    a = ap.parse_args()

    workload = fold_workload(a.nodes, a.pods)
    bench_parts(workload)
    fsync: FsyncPolicy
    if not a.fold_only:
        for fsync in ("batch", "never"):
            with tempfile.TemporaryDirectory() as d, FileLog(d, fsync=fsync) as flog:
                bench_raw("filelog", flog, a.records, a.size, a.batch, fsync=fsync)
    with tempfile.TemporaryDirectory() as d, FileLog(d) as flog:
        bench_fold("filelog", flog, workload, a.batch)

    if a.no_kafka:
        return
    started = False
    bootstrap = a.kafka
    if not bootstrap:
        subprocess.run([str(KAFKA_SH), "start"], check=True)
        started = True
        bootstrap = f"127.0.0.1:{os.environ.get('HOURGLASS_KAFKA_PORT', '19092')}"
    try:
        from ingest.kafkalog import KafkaLog

        with KafkaLog(bootstrap) as klog:
            if not a.fold_only:
                bench_raw("kafka", klog, a.records, a.size, a.batch)
            bench_fold("kafka", klog, workload, a.batch)
    finally:
        if started:
            subprocess.run([str(KAFKA_SH), "stop"], check=False)


if __name__ == "__main__":
    main()
