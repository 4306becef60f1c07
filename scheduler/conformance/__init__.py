"""The KAI conformance scenarios shipped with Hourglass, and the runner that checks the engine against them."""

from pathlib import Path

SCENARIOS_DIR = Path(__file__).resolve().parent / "scenarios"
"""KAI's scenario files (``kai/``) and Hourglass's real-node ones (``hourglass/``), installed with the package."""
