"""Small slices of the shipped Alibaba trace: the first tasks by creation time, and a 5-node, 16-GPU
cluster on which they contend.
"""

from __future__ import annotations

import csv
from pathlib import Path

from ingest.trace import DEFAULT_GPU_NODES, DEFAULT_PODS, TraceTask, read_pods

SLICE = 300


SMALL_NODES = ("openb-node-0000", "openb-node-0001", "openb-node-0002", "openb-node-0003", "openb-node-0022")


def first_tasks(n: int) -> list[TraceTask]:
    """The first ``n`` tasks of the shipped trace by creation time."""
    tasks = read_pods(DEFAULT_PODS)
    order = sorted(range(len(tasks)), key=lambda i: (tasks[i].creation_s or 0, i))
    return [tasks[i] for i in order[:n]]


def small_nodes_csv(path: Path) -> Path:
    """Write the shipped node list cut to the five ``SMALL_NODES`` to ``path``."""
    with DEFAULT_GPU_NODES.open(newline="") as src, path.open("w", newline="") as dst:
        reader = csv.DictReader(src)
        writer = csv.DictWriter(dst, fieldnames=list(reader.fieldnames or []))
        writer.writeheader()
        for row in reader:
            if row["sn"] in SMALL_NODES:
                writer.writerow(row)
    return path
