"""An installed wheel (not the source tree) carries what it runs: ``hourglass conformance`` with the
scenario files shipped inside the package, from a directory that is not the repository."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT


@pytest.mark.timeout(900)
def test_installed_wheel_runs_its_shipped_conformance_scenarios(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(wheels),
            str(REPO_ROOT),
        ],
        check=True,
        timeout=600,
    )
    [wheel] = wheels.glob("hourglass-*.whl")
    env_dir = tmp_path / "venv"
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of the checkout on the path
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q", str(wheel)],
        env=clean,
        check=True,
        timeout=300,
    )
    # The dependencies come from this interpreter's site-packages, added as plain directories: their .pth
    # hooks (an editable install of this checkout among them) do not run, so only the wheel is Hourglass.
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site) / "_hourglass_test_deps.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    found = subprocess.run(
        [str(py), "-c", "import scheduler.conformance as c; print(c.SCENARIOS_DIR)"],
        cwd=elsewhere,
        env=clean,
        capture_output=True,
        text=True,
    )
    assert found.returncode == 0, found.stderr[-2000:]
    where = found.stdout.strip()
    assert Path(where).is_relative_to(env_dir), where  # the installed copy, not the checkout
    out = subprocess.run(
        [str(env_dir / "bin" / "hourglass"), "conformance"],
        cwd=elsewhere,
        env=clean,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    last = out.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"conformance: (\d+) passed, 0 failed", last)
    assert m and int(m.group(1)) >= 358, last
