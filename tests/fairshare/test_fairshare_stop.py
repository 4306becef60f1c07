"""``hourglass fairshare`` stops promptly on SIGTERM, as a Deployment's pod must (the kubelet's grace period
is 30 s), even though it refreshes only every ``refresh_s`` (60 s by default)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from fairshare.config import FairshareConfig
from fairshare.service import FairshareService
from ingest.memlog import MemoryLog


def test_sigterm_between_refreshes_exits_within_seconds(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "analytics.cli", "fairshare", "--log", str(tmp_path / "log")],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        # The first refresh is done once it says so; then it waits refresh_s for the next one.
        deadline = time.monotonic() + 60
        for line in proc.stderr:
            if "nothing to compute" in line or "published" in line:
                break
            assert time.monotonic() < deadline, "fairshare never finished its first refresh"
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    assert took < 3.0, f"fairshare took {took:.1f} s to exit on SIGTERM"


def test_stop_wakes_the_wait_between_steps() -> None:
    service = FairshareService(MemoryLog(), FairshareConfig(refresh_s=3600))
    done = threading.Event()

    def run() -> None:
        service.run()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    time.sleep(0.3)  # the first step is done and the service waits for the next refresh
    service.stop()
    assert done.wait(timeout=2.0), "run() kept waiting for the next refresh after stop()"
    assert service.stats.computed + service.stats.failures <= 1
