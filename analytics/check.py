"""``hourglass check -f pod.yaml --log LOG``: placeholder (filled in below)."""

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Placeholder."""


def run_cli(args: argparse.Namespace) -> int:
    """Placeholder."""
    return 2
