"""Headless Chromium for the tests that render the HTML report (installed by ``tools/chromium/install.sh``)."""

from __future__ import annotations

import os
import shutil

import pytest


def chromium_or_skip() -> str:
    """The browser's path: ``HOURGLASS_CHROMIUM``, else ``chromium`` / ``chromium-browser`` on PATH. Without
    one the test is skipped, except under CI, where it fails: CI installs the browser, so a skip there would
    hide a broken install."""
    for name in (os.environ.get("HOURGLASS_CHROMIUM", ""), "chromium", "chromium-browser"):
        path = shutil.which(name) if name else None
        if path:
            return path
    message = "Chromium not found (tools/chromium/install.sh installs Debian's package)"
    if os.environ.get("CI"):
        pytest.fail(f"{message}; CI is set, so the browser test must run", pytrace=False)
    pytest.skip(message)
