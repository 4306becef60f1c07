"""KafkaLog: the :class:`~ingest.log.Log` interface on an Apache Kafka cluster (kafka-python 3.x).

* **One partition per topic** (``partitions=1`` by default, and this log reads and writes only
  partition ``partition``, default 0): a Kafka topic is only ordered within a partition, and the
  scheduler's fold needs one total order of events. Scale-out is by shard, one partition (or one
  topic set) per scheduler instance, never by spreading one event stream over partitions.
* Topics are created on first use if missing, with explicit ``partitions``, ``replication_factor``
  and ``retention.ms`` (default ``-1``: keep forever, since replay rebuilds state from offset 0).
  An existing topic is used as it is, provided it has the partition this log addresses.
* The producer is idempotent (``enable_idempotence=True``, ``acks='all'``): a retried send never
  duplicates or reorders a record in the partition. ``append`` / ``append_many`` return once the
  broker acknowledged every record, with their offsets. Without transactions no control records
  are written, so offsets are dense from 0 as the contract says.
* ``read`` uses one consumer per topic of **confluent-kafka** (librdkafka, in C), assigned to the
  partition, repositioned to ``from_offset`` only when it is not already there (so sequential reads keep
  the prefetched data); it stops at the high watermark measured when the call starts and never waits
  for new records. kafka-python decodes every record in Python (~12 µs a record here, even with the C
  ``crc32c``), which made reading cost more than folding; librdkafka reads ~1M records/s
  (``docs/benchmarks.md``, "Event log"). It never commits: positions are kept by ``commit``.
* ``commit`` / ``committed`` store positions as consumer-group offsets (the classic group
  protocol: kafka-python does not speak KIP-848) through one non-subscribing consumer per group, so
  any Kafka tool (``kafka-consumer-groups.sh``) shows them.
* Opening fails fast: each client gives up bootstrapping after ``connect_timeout_s`` (default 5 s, where
  kafka-python waits 30 s per client), and kafka-python's own retry warnings are kept quiet meanwhile, so
  an unreachable broker is one :class:`~ingest.log.LogError` naming the address, not a minute of warnings.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any

import confluent_kafka as ck
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError, TopicAlreadyExistsError
from kafka.structs import OffsetAndMetadata

from ingest.log import Log, LogError, Record, check_commit_offset, check_name, check_read_args

__all__ = ["KafkaLog"]

DEFAULT_CONNECT_TIMEOUT_S = 5.0


@contextlib.contextmanager
def _quiet_kafka_logs() -> Iterator[None]:
    """kafka-python logs each failed connection attempt; while opening, the one LogError says it all."""
    logger = logging.getLogger("kafka")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


class KafkaLog(Log):
    """A :class:`~ingest.log.Log` on Kafka; ``bootstrap_servers`` is ``"host:port[,host:port]"``."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        partitions: int = 1,
        partition: int = 0,
        replication_factor: int = 1,
        retention_ms: int = -1,
        client_id: str = "hourglass",
        timeout_s: float = 30.0,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        producer_config: dict[str, Any] | None = None,
    ) -> None:
        if partitions < 1 or not 0 <= partition < partitions:
            raise ValueError(
                f"need partitions >= 1 and 0 <= partition < partitions, got {partitions}, {partition}"
            )
        self.bootstrap_servers = bootstrap_servers
        self.partitions = partitions
        self.partition = partition
        self.replication_factor = replication_factor
        self.retention_ms = retention_ms
        self.timeout_s = timeout_s
        self._client_id = client_id
        self._known: set[str] = set()
        self._groups: dict[str, KafkaConsumer] = {}
        self._closed = False
        servers = bootstrap_servers.split(",")
        timeout_ms = int(timeout_s * 1000)
        bootstrap_ms = int(connect_timeout_s * 1000)
        try:
            with _quiet_kafka_logs():
                self._open_clients(servers, client_id, timeout_ms, bootstrap_ms, producer_config)
        except KafkaError as exc:
            raise LogError(
                f"cannot connect to Kafka at {bootstrap_servers} (gave up after {connect_timeout_s:g} s): {exc}"
            ) from exc
        self._fast_readers: dict[str, tuple[ck.Consumer, list[int]]] = {}  # topic -> (consumer, [next offset])

    def _open_clients(
        self,
        servers: list[str],
        client_id: str,
        timeout_ms: int,
        bootstrap_ms: int,
        producer_config: dict[str, Any] | None,
    ) -> None:
        """The admin client, the producer and the reader, each bootstrapped within ``bootstrap_ms``."""
        try:
            self._admin = KafkaAdminClient(
                bootstrap_servers=servers,
                client_id=f"{client_id}-admin",
                request_timeout_ms=timeout_ms,
                bootstrap_timeout_ms=bootstrap_ms,
            )
            self._producer = KafkaProducer(
                bootstrap_servers=servers,
                client_id=f"{client_id}-producer",
                enable_idempotence=True,
                acks="all",
                linger_ms=2,
                max_block_ms=timeout_ms,
                request_timeout_ms=timeout_ms,
                bootstrap_timeout_ms=bootstrap_ms,
                **(producer_config or {}),
            )
            self._reader = KafkaConsumer(
                bootstrap_servers=servers,
                client_id=f"{client_id}-reader",
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                bootstrap_timeout_ms=bootstrap_ms,
            )
        except KafkaError:
            self._close_opened()
            raise

    def _close_opened(self) -> None:
        """Close the clients opened before one failed, so no background thread keeps retrying."""
        for name in ("_reader", "_producer", "_admin"):
            client = getattr(self, name, None)
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()

    # -- topics ------------------------------------------------------------------------------

    def ensure_topic(self, topic: str) -> None:
        """Create ``topic`` if missing; check it has the partition this log uses."""
        if topic in self._known:
            return
        check_name("topic", topic)
        spec = {
            topic: {
                "num_partitions": self.partitions,
                "replication_factor": self.replication_factor,
                "configs": {"retention.ms": str(self.retention_ms)},
            }
        }
        with contextlib.suppress(TopicAlreadyExistsError):
            self._admin.create_topics(spec, timeout_ms=int(self.timeout_s * 1000), wait_for_metadata=True)
        deadline = time.monotonic() + self.timeout_s
        while True:
            parts = self._reader.partitions_for_topic(topic)
            if parts:
                break
            if time.monotonic() > deadline:
                raise LogError(f"topic {topic!r} has no partitions visible after {self.timeout_s}s")
            time.sleep(0.05)
        if self.partition not in parts:
            raise LogError(f"topic {topic!r} has partitions {sorted(parts)}, not partition {self.partition}")
        self._known.add(topic)

    def _tp(self, topic: str) -> TopicPartition:
        if self._closed:
            raise LogError("log is closed")
        self.ensure_topic(topic)
        return TopicPartition(topic, self.partition)

    # -- Log API -----------------------------------------------------------------------------

    def append(self, topic: str, key: bytes | None, value: bytes) -> int:
        return self.append_many(topic, [(key, value)])[0]

    def append_many(self, topic: str, records: Iterable[tuple[bytes | None, bytes]]) -> list[int]:
        tp = self._tp(topic)
        futures = [
            self._producer.send(tp.topic, key=key, value=value, partition=tp.partition)
            for key, value in records
        ]
        if not futures:
            return []
        self._producer.flush(timeout=self.timeout_s)
        try:
            return [int(f.get(timeout=self.timeout_s).offset) for f in futures]
        except KafkaError as exc:
            raise LogError(f"append to {topic!r} failed: {exc}") from exc

    def end_offset(self, topic: str) -> int:
        tp = self._tp(topic)
        return int(self._reader.end_offsets([tp], timeout_ms=int(self.timeout_s * 1000))[tp])

    def _fast_reader(self, topic: str) -> tuple[ck.Consumer, list[int]]:
        reader = self._fast_readers.get(topic)
        if reader is None:
            consumer = ck.Consumer(
                {
                    "bootstrap.servers": self.bootstrap_servers,
                    "client.id": f"{self._client_id}-reader",
                    # librdkafka wants a group id even for assign(); this one never joins nor commits.
                    "group.id": f"{self._client_id}-reader",
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    # Below the earliest retained offset (retention), start at the earliest record.
                    "auto.offset.reset": "earliest",
                    "fetch.wait.max.ms": 10,
                    "max.partition.fetch.bytes": 8 << 20,  # fewer, larger fetches (default 1 MiB)
                    "queued.max.messages.kbytes": 32 << 10,  # prefetch per topic
                    # When the prefetch queue is full, fetch again as soon as it drains (default: 1 s).
                    "fetch.queue.backoff.ms": 5,
                }
            )
            reader = self._fast_readers[topic] = (consumer, [-1])
        return reader

    def read(self, topic: str, from_offset: int, max_records: int = 1000) -> list[Record]:
        check_read_args(from_offset, max_records)
        tp = self._tp(topic)
        consumer, position = self._fast_reader(topic)
        # The high watermark of the last fetch (librdkafka caches it) saves a round trip while it is
        # ahead of the read; only at the end of what was fetched do we ask the broker.
        try:
            end = consumer.get_watermark_offsets(ck.TopicPartition(topic, tp.partition), cached=True)[1]
        except ck.KafkaException:
            end = -1
        if end is None or end <= from_offset:
            end = self.end_offset(topic)
        if from_offset >= end:
            return []
        stop = min(end, from_offset + max_records)
        if position[0] != from_offset:
            consumer.assign([ck.TopicPartition(topic, tp.partition, from_offset)])
            position[0] = from_offset
        out: list[Record] = []
        deadline = time.monotonic() + self.timeout_s
        next_offset = from_offset
        while next_offset < stop:
            try:
                batch = consumer.consume(stop - next_offset, 0.2)
            except ck.KafkaException as exc:
                position[0] = -1
                raise LogError(f"read of {topic!r} from offset {next_offset} failed: {exc}") from exc
            for msg in batch:
                error = msg.error()
                if error is not None:
                    position[0] = -1
                    raise LogError(f"read of {topic!r} from offset {next_offset} failed: {error}")
                offset, value = msg.offset(), msg.value()
                if offset is None or offset < next_offset:
                    continue  # already returned (cannot happen after an assign, but be safe)
                if offset >= stop:  # past a gap: the consumer is ahead of the next read
                    position[0] = -1
                    return out
                out.append(Record(offset, msg.key(), value if value is not None else b""))
                next_offset = offset + 1
            if not batch and time.monotonic() > deadline:
                position[0] = -1
                raise LogError(f"read of {topic!r} from offset {next_offset} timed out after {self.timeout_s}s")
        # consume() never hands out more than asked for, so the consumer now sits at next_offset.
        position[0] = next_offset
        return out

    def _group(self, group: str) -> KafkaConsumer:
        consumer = self._groups.get(group)
        if consumer is None:
            check_name("group", group)
            consumer = KafkaConsumer(
                bootstrap_servers=self.bootstrap_servers.split(","),
                client_id=f"{self._client_id}-{group}",
                group_id=group,
                enable_auto_commit=False,
            )
            self._groups[group] = consumer
        return consumer

    def commit(self, group: str, topic: str, offset: int) -> None:
        check_commit_offset(offset)
        tp = self._tp(topic)
        try:
            self._group(group).commit({tp: OffsetAndMetadata(offset, "", -1)})
        except KafkaError as exc:
            raise LogError(f"commit of {group!r} on {topic!r} failed: {exc}") from exc

    def committed(self, group: str, topic: str) -> int:
        tp = self._tp(topic)
        offset = self._group(group).committed(tp, timeout_ms=int(self.timeout_s * 1000))
        return 0 if offset is None else int(offset)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._producer.flush(timeout=self.timeout_s)
        self._producer.close(timeout=self.timeout_s)
        self._reader.close()
        for reader, _ in self._fast_readers.values():
            reader.close()
        for consumer in self._groups.values():
            consumer.close()
        self._admin.close()
