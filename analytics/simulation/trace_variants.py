"""Workload and cluster variants of the Alibaba trace for the placement benchmark.

The FGD paper evaluates on variants of its default pod list (``openb_pod_list_<variant>.csv``): more
multi-GPU tasks appended (``multigpuNN``), more tasks sharing a GPU (``gpushareNN``), more tasks restricted
to GPU models (``gpuspecNN``). Those files are not shipped; these rules make comparable variants from the
shipped default trace, each a fixed function of the trace and a fixed generator seed (the benchmark's own
seed then shuffles and resamples the variant as it does the default trace):

* ``multigpu``: the default tasks plus copies of its multi-GPU tasks (drawn uniformly with replacement,
  named ``<name>-mgpu-<i>``) until multi-GPU tasks ask for at least 30 % of the GPUs requested (the
  paper's ``multigpuNN`` files add multi-GPU tasks to the default list the same way);
* ``gpushare``: whole single-GPU tasks, picked at random, become GPU-sharing tasks whose share is drawn from
  the trace's own sharing tasks, until 60 % of the GPU tasks share a GPU (default: 44 %);
* ``gpuspec``: a random 33 % of the GPU tasks accept one GPU model only, drawn in proportion to the
  cluster's GPUs of each model among the models with nodes big enough for the task (as ``gpuspec33``);
* ``nodes``: a different node mix for the default tasks: the 2-GPU nodes of each model are merged in
  pairs (name order) into 4-GPU nodes with the pair's CPU and memory, so the cluster keeps its GPUs but has
  half as many small nodes.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from ingest.events import NodeUpserted
from ingest.trace import TraceTask

__all__ = ["VARIANTS", "VARIANT_SEED", "variant_nodes", "variant_tasks"]

VARIANTS = ("default", "multigpu", "gpushare", "gpuspec", "nodes")
VARIANT_SEED = 2023  # one fixed draw per variant, independent of the benchmark's seeds

MULTIGPU_SHARE = 0.30  # multi-GPU tasks' share of the GPUs requested
GPUSHARE_SHARE = 0.60  # sharing tasks' share of the GPU tasks
GPUSPEC_SHARE = 0.33  # model-constrained tasks' share of the GPU tasks


def _check(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r} (known: {', '.join(VARIANTS)})")


def variant_tasks(variant: str, tasks: Sequence[TraceTask], nodes: Sequence[NodeUpserted]) -> list[TraceTask]:
    """The pod list of `variant` made from `tasks` (the default trace) for the cluster `nodes`."""
    _check(variant)
    base = sorted(tasks, key=lambda t: t.name)
    rng = random.Random(VARIANT_SEED)
    if variant == "multigpu":
        return _more_multigpu(base, rng)
    if variant == "gpushare":
        return _more_sharing(base, rng)
    if variant == "gpuspec":
        return _more_constrained(base, nodes, rng)
    return base


def variant_nodes(variant: str, nodes: Sequence[NodeUpserted]) -> list[NodeUpserted]:
    """The node list of `variant` (only ``nodes`` changes it)."""
    _check(variant)
    if variant != "nodes":
        return list(nodes)
    pairs: dict[str | None, list[NodeUpserted]] = {}
    out: list[NodeUpserted] = []
    for n in sorted(nodes, key=lambda e: e.name):
        if n.gpus == 2:
            pairs.setdefault(n.gpu_model, []).append(n)
        else:
            out.append(n)
    for _, group in sorted(pairs.items(), key=lambda kv: kv[0] or ""):
        for i in range(0, len(group) - 1, 2):
            a, b = group[i], group[i + 1]
            name = f"{a.name}-{b.name.rsplit('-', 1)[-1]}"
            out.append(
                a.model_copy(
                    update={
                        "uid": name,
                        "name": name,
                        "cpu_millicores": a.cpu_millicores + b.cpu_millicores,
                        "memory_bytes": a.memory_bytes + b.memory_bytes,
                        "gpus": 4,
                    }
                )
            )
        if len(group) % 2:
            out.append(group[-1])
    return sorted(out, key=lambda e: e.name)


def _more_multigpu(base: list[TraceTask], rng: random.Random) -> list[TraceTask]:
    multi = [t for t in base if t.num_gpu > 1]
    if not multi:
        raise ValueError("the trace has no multi-GPU task to copy")
    out = list(base)
    total = sum(t.gpu_request_milli for t in base)
    mgpu = sum(t.gpu_request_milli for t in multi)
    i = 0
    while mgpu < MULTIGPU_SHARE * total:
        t = multi[rng.randrange(len(multi))]
        out.append(replace(t, name=f"{t.name}-mgpu-{i}"))
        total += t.gpu_request_milli
        mgpu += t.gpu_request_milli
        i += 1
    return out


def _more_sharing(base: list[TraceTask], rng: random.Random) -> list[TraceTask]:
    gpu_tasks = [t for t in base if t.num_gpu]
    shares = [t.gpu_milli for t in gpu_tasks if t.num_gpu == 1 and t.gpu_milli < 1000]
    whole = [i for i, t in enumerate(base) if t.num_gpu == 1 and t.gpu_milli >= 1000]
    sharing = len(shares)
    out = list(base)
    rng.shuffle(whole)
    for i in whole:
        if sharing >= GPUSHARE_SHARE * len(gpu_tasks):
            break
        out[i] = replace(out[i], gpu_milli=shares[rng.randrange(len(shares))])
        sharing += 1
    return out


def _more_constrained(
    base: list[TraceTask], nodes: Sequence[NodeUpserted], rng: random.Random
) -> list[TraceTask]:
    # GPUs per model, and the largest node of each model (a model whose nodes are all smaller than the
    # task could never serve it).
    gpus: dict[str, int] = {}
    largest: dict[str, int] = {}
    for n in nodes:
        if n.gpus and n.gpu_model:
            gpus[n.gpu_model] = gpus.get(n.gpu_model, 0) + n.gpus
            largest[n.gpu_model] = max(largest.get(n.gpu_model, 0), n.gpus)
    models = sorted(gpus)
    idx = [i for i, t in enumerate(base) if t.num_gpu and not t.gpu_spec]
    picked = sorted(rng.sample(idx, round(GPUSPEC_SHARE * len(idx))))
    out = list(base)
    for i in picked:
        t = out[i]
        ok = [m for m in models if largest[m] >= t.num_gpu]
        model = rng.choices(ok, weights=[gpus[m] for m in ok])[0]
        out[i] = replace(t, gpu_spec=(model,))
    return out
