"""The Alibaba trace reader: shipped files, row validation, and the mapping to engine requests."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.events import PodRequests
from ingest.trace import (
    DEFAULT_ALL_NODES,
    DEFAULT_GPU_NODES,
    DEFAULT_PODS,
    MIB,
    TraceError,
    TraceTask,
    read_nodes,
    read_pods,
    read_pods_lenient,
    task_node_affinity,
    task_requests,
)
from tests.support.paths import REPO_ROOT

SHARED_TRACES = REPO_ROOT.parent / "shared" / "traces" / "alibaba-gpu-2023"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
    "scheduled_time\n"
)


def _write(tmp_path: Path, text: str, name: str = "pods.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# --------------------------------------------------------------------------- shipped files


def test_shipped_gpu_nodes() -> None:
    nodes = read_nodes(DEFAULT_GPU_NODES)
    assert len(nodes) == 1213
    assert sum(n.gpus for n in nodes) == 6212
    assert sum(n.cpu_millicores for n in nodes) == 107_018_000
    first = nodes[0]
    assert (first.name, first.cpu_millicores, first.memory_bytes, first.gpus) == (
        "openb-node-0000",
        64000,
        262144 * MIB,
        2,
    )
    assert first.gpu_model == "P100" and first.labels == {"gpu-model": "P100"}
    assert {n.gpu_model for n in nodes} == {"G2", "T4", "P100", "V100M16", "V100M32", "G3", "A10"}


def test_shipped_all_nodes_include_cpu_only_nodes() -> None:
    nodes = read_nodes(DEFAULT_ALL_NODES)
    assert len(nodes) == 1523
    cpu_only = [n for n in nodes if n.gpus == 0]
    assert len(cpu_only) == 1523 - 1213
    assert all(n.gpu_model is None and n.labels == {} for n in cpu_only)


def test_shipped_default_pods() -> None:
    tasks = read_pods(DEFAULT_PODS)
    assert len(tasks) == 8152
    assert sum(t.shared for t in tasks) == 3078
    by_gpus = {g: sum(1 for t in tasks if t.num_gpu == g) for g in range(9)}
    assert (by_gpus[0], by_gpus[1], by_gpus[2], by_gpus[4], by_gpus[8]) == (1088, 6989, 16, 15, 44)
    assert sum(t.gpu_request_milli for t in tasks) == 6_086_800
    t1 = tasks[1]
    assert t1 == TraceTask(
        name="openb-pod-0001",
        cpu_millicores=6000,
        memory_bytes=12288 * MIB,
        num_gpu=1,
        gpu_milli=460,
        gpu_spec=(),
        creation_s=427061,
        deletion_s=12902960,
        scheduled_s=427061,
        qos="LS",
        pod_phase="Running",
    )
    # tasks that never got scheduled have no scheduled time
    assert sum(t.scheduled_s is None for t in tasks) == 897


@pytest.mark.skipif(not SHARED_TRACES.is_dir(), reason="shared traces not present")
def test_variant_pod_lists_read_from_any_path() -> None:
    spec = read_pods(SHARED_TRACES / "openb_pod_list_gpuspec33.csv")
    assert len(spec) == 8152 and any(t.gpu_spec for t in spec)
    multi = read_pods(SHARED_TRACES / "openb_pod_list_multigpu20.csv")  # five columns only
    assert multi and all(t.creation_s is None and t.gpu_spec == () for t in multi)


# --------------------------------------------------------------------------- mapping


def test_task_requests_shapes() -> None:
    base = {"cpu_millicores": 4000, "memory_bytes": 8 * MIB}
    whole = TraceTask(name="a", num_gpu=1, gpu_milli=1000, **base)
    multi = TraceTask(name="b", num_gpu=4, gpu_milli=1000, **base)
    frac = TraceTask(name="c", num_gpu=1, gpu_milli=250, **base)
    cpu = TraceTask(name="d", num_gpu=0, gpu_milli=0, **base)
    assert task_requests(whole) == PodRequests(cpu_millicores=4000, memory_bytes=8 * MIB, gpus=1)
    assert task_requests(multi).gpus == 4
    assert task_requests(frac) == PodRequests(
        cpu_millicores=4000, memory_bytes=8 * MIB, gpu_fraction_milli=250
    )
    assert task_requests(cpu) == PodRequests(cpu_millicores=4000, memory_bytes=8 * MIB)


def test_gpu_spec_becomes_required_affinity(tmp_path: Path) -> None:
    p = _write(tmp_path, POD_HEADER + "p0,1000,10,1,500,V100M16|V100M32|V100M32,LS,Running,0,5,1\n")
    (t,) = read_pods(p)
    assert t.gpu_spec == ("V100M16", "V100M32", "V100M32")
    (term,) = task_node_affinity(t)
    (req,) = term.match_expressions
    assert (req.key, req.operator, req.values) == ("gpu-model", "In", ["V100M16", "V100M32"])
    assert task_node_affinity(TraceTask("x", 1000, 0, 1, 1000)) == []


def test_zero_cpu_counts_as_100_millicores(tmp_path: Path) -> None:
    p = _write(tmp_path, POD_HEADER + "p0,0,10,1,1000,,LS,Running,0,5,\n")
    (t,) = read_pods(p)
    assert t.cpu_millicores == 100 and t.scheduled_s is None and t.memory_bytes == 10 * MIB


# --------------------------------------------------------------------------- bad rows


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ("p1,abc,10,1,1000,,LS,Running,0,5,1", "cpu_milli"),
        ("p1,1000,-5,1,1000,,LS,Running,0,5,1", "memory_mib"),
        ("p1,1000,10,1,1500,,LS,Running,0,5,1", "gpu_milli"),
        ("p1,1000,10,0,500,,LS,Running,0,5,1", "gpu_milli"),
        ("p1,1000,10,2,0,,LS,Running,0,5,1", "gpu_milli"),
        ("p1,1000,10,1,500,V100||T4,LS,Running,0,5,1", "gpu_spec"),
        ("p1,1000,10,1,500,,LS,Running,9,5,9", "deletion_time"),
        ("p1,1000,10,1,500,,LS,Running,9,10,3", "scheduled_time"),
        (",1000,10,1,500,,LS,Running,0,5,1", "name"),
        ("p0,1000,10,1,500,,LS,Running,0,5,1", "name"),  # duplicate of the first row
        ("p1,1000,10", "num_gpu"),
    ],
)
def test_bad_row_names_file_line_and_field(tmp_path: Path, row: str, field: str) -> None:
    good = "p0,1000,10,1,500,,LS,Running,0,5,1\n"
    p = _write(tmp_path, POD_HEADER + good + row + "\n" + "p2,1000,10,0,0,,LS,Running,0,5,1\n")
    with pytest.raises(TraceError) as info:
        read_pods(p)
    err = info.value
    assert (err.path, err.line, err.field) == (str(p), 3, field)
    assert str(err).startswith(f"{p}:3: {field}: ")
    tasks, errors = read_pods_lenient(p)
    assert [t.name for t in tasks] == ["p0", "p2"]  # the bad row is left out, the rest goes on
    assert [e.line for e in errors] == [3]


def test_surplus_cells_and_missing_columns(tmp_path: Path) -> None:
    p = _write(tmp_path, POD_HEADER + "p0,1000,10,1,500,,LS,Running,0,5,1,extra\n")
    _, errors = read_pods_lenient(p)
    assert len(errors) == 1 and errors[0].field is None and "more cell" in errors[0].message
    q = _write(tmp_path, "name,cpu_milli,num_gpu\np0,1,1\n", "short.csv")
    with pytest.raises(TraceError, match=r"short\.csv:1: missing column\(s\) memory_mib, gpu_milli"):
        read_pods_lenient(q)


def test_bad_node_rows(tmp_path: Path) -> None:
    header = "sn,cpu_milli,memory_mib,gpu,model\n"
    p = _write(tmp_path, header + "n0,1000,10,2,\n", "nodes.csv")
    with pytest.raises(TraceError, match=r"nodes\.csv:2: model: a node with 2 GPU\(s\) needs a GPU model"):
        read_nodes(p)
    q = _write(tmp_path, header + "n0,1000,10,0,\nn0,1000,10,0,\n", "dup.csv")
    with pytest.raises(TraceError, match=r"dup\.csv:3: sn: duplicate node name"):
        read_nodes(q)
