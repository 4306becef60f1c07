"""An unreachable Kafka is one clear line within seconds, not half a minute of retry warnings."""

from __future__ import annotations

import logging
import socket
import time

import pytest

from analytics.cli import main
from ingest.kafkalog import KafkaLog
from ingest.log import LogError


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_opening_an_unreachable_broker_fails_fast_without_warnings(caplog: pytest.LogCaptureFixture) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    caplog.set_level(logging.DEBUG)
    started = time.monotonic()
    with pytest.raises(LogError, match=f"cannot connect to Kafka at {address}"):
        KafkaLog(address, connect_timeout_s=1.0)
    assert time.monotonic() - started < 5.0
    assert [r for r in caplog.records if r.name.startswith("kafka") and r.levelno >= logging.WARNING] == []
    # the kafka loggers are as they were: later connection trouble is still reported
    assert logging.getLogger("kafka").level == logging.NOTSET


def test_a_command_on_an_unreachable_kafka_log_is_rc_2_and_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    started = time.monotonic()
    rc = main(["replay", f"kafka://127.0.0.1:{_closed_port()}"])
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and err.startswith("replay: cannot connect to Kafka at 127.0.0.1:")
    assert elapsed < 15.0  # the default connect timeout is 5 s (kafka-python alone would wait 30 s)
