"""Log backend benchmark: records appended / s and read / s, and events folded / s (read + parse + fold,
the scheduler service's :class:`~scheduler.service.Folder`), FileLog and (if reachable) Kafka.

Appends go in batches through ``append_many`` (FileLog: one write + one fsync per batch with the
default ``fsync="batch"``; Kafka: idempotent producer, acks=all, flush per batch); reads page
through the topic with ``read(topic, offset, batch)``. Run:

    python benchmarks/bench_log.py [--records N] [--size BYTES] [--batch B] [--kafka HOST:PORT]

``--kafka`` defaults to ``$HOURGLASS_KAFKA_BOOTSTRAP``; when neither is set the script starts a
broker with ``tools/kafka/kafka.sh start`` on port 19092 and stops it afterwards
(``--no-kafka`` skips Kafka).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from ingest.events import dump_event
from ingest.filelog import FileLog, FsyncPolicy
from ingest.log import Log
from scheduler.service import Folder
from scheduler.synthetic import SyntheticSpec, synthetic_events

KAFKA_SH = Path(__file__).resolve().parent.parent / "tools" / "kafka" / "kafka.sh"


def bench(name: str, log: Log, records: int, size: int, batch: int) -> None:
    topic = f"bench.{uuid.uuid4().hex[:8]}"
    value = b"x" * size
    keys = [f"ns/pod-{i % 1000}".encode() for i in range(batch)]
    t0 = time.perf_counter()
    done = 0
    while done < records:
        n = min(batch, records - done)
        log.append_many(topic, [(keys[i], value) for i in range(n)])
        done += n
    t1 = time.perf_counter()
    seen = 0
    offset = 0
    while chunk := log.read(topic, offset, batch):
        seen += len(chunk)
        offset = chunk[-1].offset + 1
    t2 = time.perf_counter()
    assert seen == records, (seen, records)
    backend = name.split()[0].lower() + "".join(f" {w}" for w in name.split()[1:])
    print(
        f"bench: log_append backend={backend} records={records} bytes={size} batch={batch} "
        f"rate={records / (t1 - t0):.0f} seconds={t1 - t0:.3f}"
    )
    print(
        f"bench: log_read backend={backend} records={records} bytes={size} batch={batch} "
        f"rate={records / (t2 - t1):.0f} seconds={t2 - t1:.3f}"
    )


def bench_fold(name: str, log: Log, events: list[bytes], batch: int) -> None:
    """Append contract events, then read them back and fold them as the service does."""
    topic = f"bench.fold.{uuid.uuid4().hex[:8]}"
    for i in range(0, len(events), batch):
        log.append_many(topic, [(None, v) for v in events[i : i + batch]])
    folder = Folder(topic)
    t0 = time.perf_counter()
    offset = 0
    while chunk := log.read(topic, offset, batch):
        for r in chunk:
            if folder.feed(r) is not None:
                raise AssertionError(f"event {r.offset} was rejected")
        offset = chunk[-1].offset + 1
    dt = time.perf_counter() - t0
    assert folder.folded == len(events)
    backend = name.split()[0].lower()
    print(
        f"bench: fold backend={backend} events={len(events)} batch={batch} rate={len(events) / dt:.0f} seconds={dt:.3f}"
    )


def _fold_workload() -> list[bytes]:
    spec = SyntheticSpec(nodes=1000, pending_pods=50_000, running_fraction=0.3, seed=1)
    return [dump_event(e) for e in synthetic_events(spec)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=200, help="value size in bytes (an event is ~150-400 B)")
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--kafka", default=os.environ.get("HOURGLASS_KAFKA_BOOTSTRAP"))
    ap.add_argument("--no-kafka", action="store_true")
    a = ap.parse_args()

    fsync: FsyncPolicy
    for fsync in ("batch", "never"):
        with tempfile.TemporaryDirectory() as d, FileLog(d, fsync=fsync) as flog:
            bench(f"FileLog fsync={fsync}", flog, a.records, a.size, a.batch)
    workload = _fold_workload()
    with tempfile.TemporaryDirectory() as d, FileLog(d) as flog:
        bench_fold("FileLog fold", flog, workload, a.batch)

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
            bench("KafkaLog", klog, a.records, a.size, a.batch)
            bench_fold("KafkaLog fold", klog, workload, a.batch)
    finally:
        if started:
            subprocess.run([str(KAFKA_SH), "stop"], check=False)


if __name__ == "__main__":
    main()
