"""Builders shared by the topology tests (tests/analytics/simulation/test_scenario_topology.py,
tests/scheduler/engine/actions/test_topology_actions.py).

* :func:`racks_scenario` — the scenario both run through ``hourglass simulate --config``: 2 blocks x 2
  racks x 2 nodes of 8 GPUs, queue ``train`` submitting 2-pod gangs of whole nodes under a topology
  constraint, queue ``batch`` single-GPU jobs that leave partly used nodes;
* :func:`write_scenario`, :func:`simulate_json`, :func:`sql_json`, :func:`cli` — writing it and running the command line as a
  user would;
* :func:`constrained_spec` — a small synthetic cluster where every job is constrained to a topology.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import yaml

from analytics.cli import main
from tests.support.synthetic import SyntheticSpec

BLOCK, RACK, HOST = "sim.io/block", "sim.io/rack", "kubernetes.io/hostname"


def racks_scenario(constraint: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    """2 blocks x 2 racks x 2 nodes of 8 GPUs, one topology ``dc`` (block, rack, host), over 8 h (``extra``
    replaces top-level keys, e.g. ``duration="6h"``); queue ``train`` gets 2-pod gangs of whole nodes (one
    rack's worth, ~3 an hour) under *constraint*, queue ``batch`` single-GPU jobs (~30 an hour)."""
    doc: dict[str, Any] = {
        "version": 1,
        "duration": "8h",
        "cycle_period": "60s",
        "nodes": [
            {
                "count": 8,
                "gpus": 8,
                "name_prefix": "gpu",
                "domains": [
                    {"label": BLOCK, "nodes": 4, "prefix": "block"},
                    {"label": RACK, "nodes": 2, "prefix": "rack"},
                ],
            }
        ],
        "topologies": [{"name": "dc", "levels": [BLOCK, RACK, HOST]}],
        "queues": [
            {"name": "train", "gpu": {"quota": 32, "limit": 32}},
            {"name": "batch", "gpu": {"quota": 32, "limit": 32}},
        ],
        "workloads": [
            {
                "queue": "train",
                "kind": "poisson",
                "name": "gang",
                "arrivals_per_hour": 3,
                "runtime": {"dist": "exponential", "mean": "1h"},
                "pods": 2,
                "gpus_per_pod": 8,
                "seed": 3,
                "topology_constraint": constraint,
            },
            {
                "queue": "batch",
                "kind": "poisson",
                "name": "small",
                "arrivals_per_hour": 30,
                "runtime": {"dist": "exponential", "mean": "1h"},
                "gpus_per_pod": 1,
                "seed": 4,
            },
        ],
    }
    doc.update(extra)
    return doc


def write_scenario(directory: Path, doc: dict[str, Any], name: str = "s.yaml") -> Path:
    """*doc* as the YAML file *directory*/*name*."""
    path = directory / name
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def cli(*args: str) -> str:
    """What ``hourglass ARGS`` prints on stdout; it must succeed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(list(args))
    assert rc == 0, out.getvalue()
    return out.getvalue()


def sql_json(store: Path, query: str) -> list[dict[str, Any]]:
    """The rows of ``hourglass sql --store STORE --format json QUERY``."""
    rows: list[dict[str, Any]] = json.loads(cli("sql", "--store", str(store), "--format", "json", query))
    return rows


def simulate_json(path: Path, out: Path, *args: str) -> dict[str, Any]:
    """``hourglass simulate --config PATH --out OUT --json ARGS``: the summary."""
    summary: dict[str, Any] = json.loads(
        cli("simulate", "--config", str(path), "--out", str(out), "--json", *args)
    )
    return summary


def constrained_spec(**overrides: Any) -> SyntheticSpec:
    """12 nodes in topology shape (1, 1, 2), 40 pending pods of one department's 2 queues, every job
    constrained to the topology; *overrides* replace fields."""
    fields: dict[str, Any] = {
        "nodes": 12,
        "pending_pods": 40,
        "departments": 1,
        "queues_per_department": 2,
        "seed": 2,
        "topology_fraction": 1.0,
        "topology_shape": (1, 1, 2),
    }
    return SyntheticSpec(**{**fields, **overrides})
