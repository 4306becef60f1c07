"""``hourglass`` commands run as processes by the tests, their output in files.

Files, not pipes: a test that reads a process's output only at the end would otherwise let a full pipe
block the process on its next log line (and a blocked leader stops renewing its Lease).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path


class CliProcess:
    """One ``python -m analytics.cli ARGV`` process; stdout and stderr go to ``DIR/NAME.out`` / ``.err``."""

    def __init__(self, name: str, argv: list[str], out_dir: Path) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self._out = out_dir / f"{name}.out"
        self._err = out_dir / f"{name}.err"
        with self._out.open("wb") as out, self._err.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "analytics.cli", *argv], stdout=out, stderr=err, start_new_session=True
            )

    @property
    def stdout(self) -> str:
        """Everything the process wrote to stdout so far."""
        return self._out.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        """Everything the process wrote to stderr so far."""
        return self._err.read_text(errors="replace")

    def running(self) -> bool:
        """Whether the process has not exited yet."""
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> int:
        """Send ``sig`` (when still running) and wait; the exit code (negative: killed by a signal)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=timeout_s)

    def kill(self) -> None:
        """SIGKILL and reap (a no-op once it has exited)."""
        self.stop(signal.SIGKILL, 30.0)
