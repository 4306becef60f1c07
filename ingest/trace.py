"""Reader for the Alibaba GPU cluster trace 2023 (``openb`` node and pod lists).

The files are the CSVs of Alibaba's ``cluster-trace-gpu-v2023`` (Weng et al., USENIX ATC '23); three of
them ship in ``ingest/data/alibaba-gpu-2023/`` (see its README), the other pod lists are read from any path.

* :func:`read_nodes` turns a node list into :class:`~ingest.events.NodeUpserted` events.
* :func:`read_pods` turns a pod list into :class:`TraceTask` rows, validating every row; a bad row raises
  :class:`TraceError` naming ``file:line`` and the field. :func:`read_pods_lenient` returns the good rows
  and the errors instead, so a caller can dead-letter bad rows and go on.
* :func:`task_requests` / :func:`task_node_affinity` map a task to the engine's request shapes.

Conventions follow the FGD simulator that produced the paper's figures: a CPU request of 0 counts as 100
millicores, ``gpu_milli`` is the share of *each* requested GPU, ``gpu_spec`` is an allow-list of GPU models.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ingest.events import NodeSelectorRequirement, NodeSelectorTerm, NodeUpserted, PodRequests

__all__ = [
    "DATA_DIR",
    "DEFAULT_ALL_NODES",
    "DEFAULT_GPU_NODES",
    "DEFAULT_PODS",
    "GPU_MODEL_LABEL",
    "MIB",
    "TraceError",
    "TraceTask",
    "read_nodes",
    "read_pods",
    "read_pods_lenient",
    "task_node_affinity",
    "task_requests",
]

DATA_DIR: Final = Path(__file__).resolve().parent / "data" / "alibaba-gpu-2023"
DEFAULT_GPU_NODES: Final = DATA_DIR / "openb_node_list_gpu_node.csv"
DEFAULT_ALL_NODES: Final = DATA_DIR / "openb_node_list_all_node.csv"
DEFAULT_PODS: Final = DATA_DIR / "openb_pod_list_default.csv"

GPU_MODEL_LABEL: Final = "gpu-model"
MIB: Final = 1 << 20
GPU_MILLI: Final = 1000
MIN_CPU_MILLI: Final = 100  # the simulator's stand-in for a task that asks for no CPU

_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
_POD_REQUIRED = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
# Label values as Kubernetes accepts them; a GPU model ends up as a node label value.
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_INT = re.compile(r"[0-9]+")


class TraceError(ValueError):
    """A bad trace row: ``path:line: field: message``; ``field`` is None for row-level problems."""

    def __init__(self, path: Path | str, line: int, field: str | None, message: str) -> None:
        where = f"{path}:{line}"
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")
        self.path = str(path)
        self.line = line
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class TraceTask:
    """One row of a pod list, in engine units.

    ``num_gpu`` GPUs with ``gpu_milli`` thousandths of each (0 for CPU-only tasks); ``gpu_spec`` lists the
    GPU models the task accepts (empty = any, as written, duplicates kept). Times are seconds from the trace
    start; None when the file has no such column or the cell is empty (tasks that never got scheduled).
    """

    name: str
    cpu_millicores: int
    memory_bytes: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...] = ()
    creation_s: int | None = None
    deletion_s: int | None = None
    scheduled_s: int | None = None
    qos: str | None = None
    pod_phase: str | None = None

    @property
    def gpu_request_milli(self) -> int:
        """Total GPU asked for, in milli-GPU (``num_gpu * gpu_milli``)."""
        return self.num_gpu * self.gpu_milli

    @property
    def shared(self) -> bool:
        """True for a GPU-sharing task: one GPU, less than all of it."""
        return self.num_gpu == 1 and self.gpu_milli < GPU_MILLI


# --------------------------------------------------------------------------- parsing helpers


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number, row) for each data row; the header must name every required column."""
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(path, 1, None, f"missing column(s) {', '.join(missing)} (header: {header})")
        for row in reader:
            # reader.line_num is the line the row ends on: right for the one-line rows these files have.
            yield reader.line_num, row


def _cell(path: Path, line: int, row: dict[str, str], field: str) -> str:
    value = row.get(field)
    if value is None:
        raise TraceError(path, line, field, "missing (row has too few cells)")
    return value.strip()


def _int(path: Path, line: int, row: dict[str, str], field: str, lo: int = 0, hi: int | None = None) -> int:
    text = _cell(path, line, row, field)
    if not _INT.fullmatch(text):
        raise TraceError(path, line, field, f"expected a non-negative integer, got {text!r}")
    value = int(text)
    if value < lo or (hi is not None and value > hi):
        bounds = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        raise TraceError(path, line, field, f"must be {bounds}, got {value}")
    return value


def _opt_int(path: Path, line: int, row: dict[str, str], field: str) -> int | None:
    if row.get(field) is None or not row[field].strip():
        return None
    return _int(path, line, row, field)


def _opt_str(row: dict[str, str], field: str) -> str | None:
    value = (row.get(field) or "").strip()
    return value or None


# --------------------------------------------------------------------------- nodes


def read_nodes(path: Path | str = DEFAULT_GPU_NODES) -> list[NodeUpserted]:
    """One ``NodeUpserted`` (at_ms 0) per row of a node list, in file order.

    The GPU model goes to ``gpu_model`` and to the label ``gpu-model=<model>`` (what a task's ``gpu_spec``
    is matched against); memory MiB becomes bytes. Raises :class:`TraceError` on the first bad row.
    """
    path = Path(path)
    out: list[NodeUpserted] = []
    seen: set[str] = set()
    for line, row in _rows(path, _NODE_COLUMNS):
        name = _cell(path, line, row, "sn")
        if not name:
            raise TraceError(path, line, "sn", "empty node name")
        if name in seen:
            raise TraceError(path, line, "sn", f"duplicate node name {name!r}")
        seen.add(name)
        cpu = _int(path, line, row, "cpu_milli", lo=1)
        memory = _int(path, line, row, "memory_mib", lo=1) * MIB
        gpus = _int(path, line, row, "gpu")
        model = _cell(path, line, row, "model") or None
        if model is not None and not _LABEL_VALUE.fullmatch(model):
            raise TraceError(path, line, "model", f"{model!r} is not a valid label value")
        if gpus and model is None:
            raise TraceError(path, line, "model", f"a node with {gpus} GPU(s) needs a GPU model")
        out.append(
            NodeUpserted(
                at_ms=0,
                name=name,
                cpu_millicores=cpu,
                memory_bytes=memory,
                gpus=gpus,
                gpu_model=model if gpus else None,
                labels={GPU_MODEL_LABEL: model} if gpus and model else {},
            )
        )
    return out


# --------------------------------------------------------------------------- pods


def _parse_pod(path: Path, line: int, row: dict[str, str]) -> TraceTask:
    name = _cell(path, line, row, "name")
    if not name:
        raise TraceError(path, line, "name", "empty task name")
    cpu = _int(path, line, row, "cpu_milli")
    memory = _int(path, line, row, "memory_mib") * MIB
    num_gpu = _int(path, line, row, "num_gpu")
    gpu_milli = _int(path, line, row, "gpu_milli", hi=GPU_MILLI)
    if num_gpu == 0 and gpu_milli != 0:
        raise TraceError(
            path, line, "gpu_milli", f"a CPU-only task (num_gpu 0) asks for {gpu_milli} milli-GPU"
        )
    if num_gpu > 0 and gpu_milli == 0:
        raise TraceError(path, line, "gpu_milli", f"a task with num_gpu {num_gpu} asks for 0 milli-GPU")
    spec_text = (row.get("gpu_spec") or "").strip()
    spec = tuple(spec_text.split("|")) if spec_text else ()
    for model in spec:
        if not model or not _LABEL_VALUE.fullmatch(model):
            raise TraceError(path, line, "gpu_spec", f"bad GPU model {model!r} in {spec_text!r}")
    if spec and num_gpu == 0:
        raise TraceError(path, line, "gpu_spec", "a CPU-only task cannot restrict GPU models")
    creation = _opt_int(path, line, row, "creation_time")
    deletion = _opt_int(path, line, row, "deletion_time")
    scheduled = _opt_int(path, line, row, "scheduled_time")
    if creation is not None and deletion is not None and deletion < creation:
        raise TraceError(path, line, "deletion_time", f"{deletion} is before creation_time {creation}")
    if creation is not None and scheduled is not None and scheduled < creation:
        raise TraceError(path, line, "scheduled_time", f"{scheduled} is before creation_time {creation}")
    return TraceTask(
        name=name,
        cpu_millicores=cpu or MIN_CPU_MILLI,
        memory_bytes=memory,
        num_gpu=num_gpu,
        gpu_milli=gpu_milli,
        gpu_spec=spec,
        creation_s=creation,
        deletion_s=deletion,
        scheduled_s=scheduled,
        qos=_opt_str(row, "qos"),
        pod_phase=_opt_str(row, "pod_phase"),
    )


def read_pods_lenient(path: Path | str = DEFAULT_PODS) -> tuple[list[TraceTask], list[TraceError]]:
    """Every valid row of a pod list (file order) and a :class:`TraceError` for each bad one.

    A repeated task name is an error on the later row. A file without the required columns still raises.
    """
    path = Path(path)
    tasks: list[TraceTask] = []
    errors: list[TraceError] = []
    seen: set[str] = set()
    for line, row in _rows(path, _POD_REQUIRED):
        try:
            if None in row:  # DictReader files surplus cells under the key None
                raise TraceError(path, line, None, f"{len(row[None])} more cell(s) than the header has")  # type: ignore[index]
            task = _parse_pod(path, line, row)
            if task.name in seen:
                raise TraceError(path, line, "name", f"duplicate task name {task.name!r}")
        except TraceError as err:
            errors.append(err)
            continue
        seen.add(task.name)
        tasks.append(task)
    return tasks, errors


def read_pods(path: Path | str = DEFAULT_PODS) -> list[TraceTask]:
    """Every row of a pod list, in file order. Raises :class:`TraceError` on the first bad row."""
    tasks, errors = read_pods_lenient(path)
    if errors:
        raise errors[0]
    return tasks


# --------------------------------------------------------------------------- mapping to requests


def task_requests(t: TraceTask) -> PodRequests:
    """The engine request of a task.

    ``num_gpu >= 2`` or ``gpu_milli == 1000``: whole GPUs; one GPU with ``gpu_milli < 1000``: a fraction of
    one device (``gpu_fraction_milli``); ``num_gpu == 0``: CPU and memory only.
    """
    if t.num_gpu == 0:
        return PodRequests(cpu_millicores=t.cpu_millicores, memory_bytes=t.memory_bytes)
    if t.num_gpu >= 2 or t.gpu_milli >= GPU_MILLI:
        # The published traces have no multi-GPU task with gpu_milli < 1000, so whole devices lose nothing.
        return PodRequests(cpu_millicores=t.cpu_millicores, memory_bytes=t.memory_bytes, gpus=t.num_gpu)
    return PodRequests(
        cpu_millicores=t.cpu_millicores, memory_bytes=t.memory_bytes, gpu_fraction_milli=t.gpu_milli
    )


def task_node_affinity(t: TraceTask) -> list[NodeSelectorTerm]:
    """A required node affinity ``gpu-model In [...]`` for a task with a ``gpu_spec``; [] otherwise."""
    if not t.gpu_spec:
        return []
    models = list(dict.fromkeys(t.gpu_spec))  # the trace repeats models ("V100M16|V100M32|V100M32")
    req = NodeSelectorRequirement(key=GPU_MODEL_LABEL, operator="In", values=models)
    return [NodeSelectorTerm(match_expressions=[req])]
