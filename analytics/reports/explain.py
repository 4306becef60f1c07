"""``hourglass explain POD``: why a pod is pending, bound or was evicted, from the decision history.

Reads the audit store (``analytics/audit/store.py``; a run directory or a ``.duckdb`` file) read-only:

* the **latest cycle that mentions the pod** (at or before ``--at``): its decisions for the pod say
  whether it is pending (``Unschedulable``), placed (``Bind``), waiting for a node being freed
  (``Pipeline``) or evicted (``Evict``);
* **the queue's standing** in that cycle (``queue_cycles``): deserved, fair share, allocated, requested and
  limit per resource, for the pod's queue and its ancestors, with a verdict (over / under fair share,
  at its limit);
* **how much is missing** (the ``Unschedulable`` decision's details: what the job's pending pods request,
  the largest free GPU count on any node);
* **who holds the GPUs** on the nodes the pod may use (node selector / allowed nodes): pods bound per the
  events log as of that cycle's events offset, their queue and GPU amount (from their latest ``Bind``
  decision, or their request), grouped by queue and by node;
* for an eviction: which action, on behalf of which workload, and which pods were placed on the victim's
  node in the same cycle.

Units in the output: GPUs as devices (0.5 = half a GPU), CPU in cores, memory in GiB.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import duckdb

from analytics.audit.store import StoreError, open_readonly, resolve_store
from scheduler.engine.record.inflight import DEFAULT_BIND_DEADLINE_MS

__all__ = [
    "ExplainError",
    "Explanation",
    "add_arguments",
    "advice",
    "explain",
    "never_fits",
    "parse_time",
    "run_cli",
]

RESOURCES: Final = ("gpu", "cpu", "memory")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_MS: Final = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
MAX_NODES_SHOWN: Final = 8


class ExplainError(RuntimeError):
    """Unknown or ambiguous pod, bad time, or an unusable store."""


@dataclass
class Explanation:
    """The answer: ``state`` (pending, bound, pipelined, evicted, finished, deleted) and printable lines."""

    pod: str
    state: str
    cycle_id: str | None
    logical_time_ms: int | None
    queue: str | None
    reason: str | None = None
    lines: list[str] = field(default_factory=list)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


# --------------------------------------------------------------------------- formatting


def parse_time(text: str) -> int:
    """``--at``: logical milliseconds (``3600000``), a duration from 0 (``90s``, ``15m``, ``2h``, ``3d``),
    or an ISO 8601 date-time (``2026-01-05T10:00:00Z``: milliseconds since the epoch)."""
    t = text.strip()
    if re.fullmatch(r"\d+", t):
        return int(t)
    m = _DURATION.fullmatch(t)
    if m:
        return int(float(m.group(1)) * _UNIT_MS[m.group(2)])
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise ExplainError(
            f"--at {text!r}: expected logical milliseconds (3600000), a duration (90s, 15m, 2h, 3d) or an"
            " ISO 8601 date-time (2026-01-05T10:00:00Z)"
        ) from None
    if dt.tzinfo is None:
        raise ExplainError(f"--at {text!r}: give a time zone (e.g. a trailing Z for UTC)")
    return int(dt.timestamp() * 1000)


def _amount(res: str, v: int | None) -> str:
    if v is None:
        return "unlimited"
    if res == "gpu":
        return f"{v / 1000:g} GPU"
    if res == "cpu":
        return f"{v / 1000:g} cores"
    return f"{v / 2**30:.1f} GiB"


def _time(ms: int) -> str:
    if ms >= 10**12:  # wall-clock milliseconds (a live cluster): show the UTC date-time
        return f"t={ms} ms ({datetime.fromtimestamp(ms / 1000, UTC).strftime('%Y-%m-%d %H:%M:%S')} UTC)"
    return f"t={ms} ms ({ms / 3_600_000:.2f} h)"  # a simulation's clock starts at 0


# --------------------------------------------------------------------------- store access


class _Store:
    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    def rows(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        cur = self.con.execute(sql, params or [])
        cols = [d[0] for d in cur.description or []]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]

    def resolve_pod(self, pod: str) -> str:
        """``namespace/name`` as given, or the one pod whose name is ``pod``; ExplainError otherwise."""
        if "/" in pod:
            found = self.rows(
                "SELECT 1 FROM decisions WHERE pod = ? OR list_contains(pods, ?) LIMIT 1", [pod, pod]
            ) or self.rows("SELECT 1 FROM events WHERE uid = ? LIMIT 1", [pod])
            if not found:
                raise ExplainError(f"unknown pod {pod!r}: no event or decision in the store mentions it")
            return pod
        cands = self.rows(
            "SELECT DISTINCT uid FROM ("
            " SELECT pod AS uid FROM decisions WHERE pod LIKE '%/' || ?"
            " UNION SELECT unnest(pods) AS uid FROM decisions WHERE kind = 'Unschedulable'"
            " UNION SELECT uid FROM events WHERE type = 'PodSubmitted' AND raw->>'name' = ?)"
            " WHERE uid LIKE '%/' || ? ORDER BY uid",
            [pod, pod, pod],
        )
        names = [str(c["uid"]) for c in cands]
        if not names:
            raise ExplainError(f"unknown pod {pod!r}: no event or decision in the store mentions it")
        if len(names) > 1:
            shown = ", ".join(names[:10]) + (" …" if len(names) > 10 else "")
            raise ExplainError(f"pod name {pod!r} is ambiguous, give namespace/name: {shown}")
        return names[0]


def _queue_rows(s: _Store, cycle_id: str, queue: str | None) -> list[dict[str, Any]]:
    """The queue and its ancestors in one cycle, leaf first."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    name = queue
    while name is not None and name not in seen:
        seen.add(name)
        rows = s.rows("SELECT * FROM queue_cycles WHERE cycle_id = ? AND queue = ?", [cycle_id, name])
        if not rows:
            break
        out.append(rows[0])
        name = rows[0]["parent"]
    return out


def _queue_lines(q: dict[str, Any], resources: tuple[str, ...] = RESOURCES) -> list[str]:
    lines = []
    for r in resources:
        alloc, fair, deserved = q[f"{r}_allocated"], q[f"{r}_fair_share"], q[f"{r}_deserved"]
        req, limit = q[f"{r}_requested"], q[f"{r}_limit"]
        if r != "gpu" and not alloc and not req:
            continue
        verdict = ""
        if limit is not None and alloc >= limit:
            verdict = "AT ITS LIMIT"
        elif alloc > fair:
            verdict = f"OVER its fair share by {_amount(r, alloc - fair)}"
        elif alloc < fair:
            verdict = f"under its fair share by {_amount(r, fair - alloc)}"
        else:
            verdict = "at its fair share"
        lines.append(
            f"    {r:<6} allocated {_amount(r, alloc)}, fair share {_amount(r, fair)},"
            f" deserved (quota) {_amount(r, deserved)}, requested {_amount(r, req)},"
            f" limit {_amount(r, limit)}: {verdict}"
        )
    return lines


def _standing(s: _Store, cycle_id: str, queue: str | None, shown: set[str] | None = None) -> list[str]:
    """The queue's and its ancestors' division; ``shown`` skips queues already printed."""
    rows = _queue_rows(s, cycle_id, queue)
    if not rows:
        return [f"  Queue {queue!r} is not in this cycle's division (it does not exist?)"]
    lines = []
    shown = shown if shown is not None else set()
    for i, q in enumerate(rows):
        if q["queue"] in shown:
            continue
        shown.add(q["queue"])
        role = "queue" if i == 0 else "parent queue"
        lines.append(f"  {role} {q['queue']} (priority {q['priority']}):")
        lines.extend(_queue_lines(q))
    return lines


def _events_offset(s: _Store, cycle_id: str) -> int:
    rows = s.rows("SELECT events_offset FROM cycles WHERE cycle_id = ?", [cycle_id])
    return int(rows[0]["events_offset"]) if rows else -1


def _holders(s: _Store, events_offset: int, t_ms: int) -> list[dict[str, Any]]:
    """Pods holding GPUs as of ``events_offset``: bound per the events log and not finished or deleted."""
    return s.rows(
        """
        WITH life AS (
          SELECT uid, arg_max(type, "offset") AS last_type, arg_max(raw, "offset") AS last_raw
          FROM events
          WHERE "offset" <= ? AND type IN ('PodSubmitted', 'PodBound', 'PodReleasing', 'PodFinished', 'PodDeleted')
          GROUP BY uid
        ),
        bound AS (
          SELECT uid, arg_max(raw, "offset") AS raw FROM events
          WHERE "offset" <= ? AND type = 'PodBound' GROUP BY uid
        ),
        sub AS (
          SELECT uid, arg_max(raw, "offset") AS raw FROM events
          WHERE "offset" <= ? AND type = 'PodSubmitted' GROUP BY uid
        ),
        binds AS (
          SELECT pod, arg_max(queue, logical_time_ms) AS queue, arg_max(job, logical_time_ms) AS job,
                 arg_max(len(gpu_devices) * CASE WHEN gpu_milli_per_device > 0 THEN gpu_milli_per_device
                         ELSE 1000 END, logical_time_ms) AS gpu_milli,
                 arg_max(node, logical_time_ms) AS node, max(logical_time_ms) AS decided_ms
          FROM decisions WHERE kind = 'Bind' AND logical_time_ms <= ? GROUP BY pod
        )
        SELECT * FROM (
        SELECT l.uid AS pod, b.raw->>'node' AS node, l.last_type = 'PodReleasing' AS releasing,
               coalesce(d.queue, sub.raw->>'queue') AS queue, d.job AS job,
               coalesce(d.gpu_milli,
                        TRY_CAST(sub.raw->'requests'->>'gpus' AS BIGINT) * 1000
                        + coalesce(TRY_CAST(sub.raw->'requests'->>'gpu_fraction_milli' AS BIGINT)
                                   * TRY_CAST(sub.raw->'requests'->>'gpu_fraction_devices' AS BIGINT), 0),
                        0) AS gpu_milli
        FROM life l JOIN bound b ON b.uid = l.uid
        LEFT JOIN sub ON sub.uid = l.uid
        LEFT JOIN binds d ON d.pod = l.uid
        WHERE l.last_type IN ('PodBound', 'PodReleasing')
        UNION ALL
        -- Binds in flight: decided (by this cycle or one within the bind deadline) but not yet back as a
        -- PodBound event. The engine counts them on their node (scheduler/engine/record/inflight.py), so
        -- the free GPUs shown here agree with the decision's "most free on a node".
        SELECT l.uid AS pod, d.node AS node, false AS releasing, d.queue AS queue, d.job AS job,
               d.gpu_milli AS gpu_milli
        FROM life l JOIN binds d ON d.pod = l.uid
        WHERE l.last_type = 'PodSubmitted' AND ? - d.decided_ms < ?
        UNION ALL
        -- Pods of other schedulers hold GPUs too: they are in no queue.
        SELECT f.uid AS pod, f.raw->>'node' AS node, (f.raw->>'releasing') = 'true' AS releasing,
               '(other schedulers)' AS queue, NULL AS job,
               coalesce(TRY_CAST(f.raw->'requests'->>'gpus' AS BIGINT), 0) * 1000
               + coalesce(TRY_CAST(f.raw->'requests'->>'gpu_fraction_milli' AS BIGINT)
                          * TRY_CAST(f.raw->'requests'->>'gpu_fraction_devices' AS BIGINT), 0) AS gpu_milli
        FROM (
          SELECT uid, arg_max(type, "offset") AS last_type, arg_max(raw, "offset") AS raw FROM events
          WHERE "offset" <= ? AND type IN ('ForeignPodUpserted', 'PodFinished', 'PodDeleted') GROUP BY uid
        ) f
        WHERE f.last_type = 'ForeignPodUpserted'
        ) ORDER BY node, pod
        """,
        [events_offset, events_offset, events_offset, t_ms, t_ms, DEFAULT_BIND_DEADLINE_MS, events_offset],
    )


def _nodes(s: _Store, events_offset: int) -> dict[str, dict[str, Any]]:
    rows = s.rows(
        """
        SELECT uid, arg_max(type, "offset") AS last_type, arg_max(raw, "offset") AS raw FROM events
        WHERE "offset" <= ? AND type IN ('NodeUpserted', 'NodeRemoved') GROUP BY uid
        """,
        [events_offset],
    )
    out = {}
    for r in rows:
        if r["last_type"] == "NodeUpserted":
            raw = json.loads(r["raw"])
            out[str(raw["name"])] = raw
    return out


def _pod_spec(s: _Store, pod: str, events_offset: int) -> dict[str, Any] | None:
    rows = s.rows(
        "SELECT arg_max(raw, \"offset\") AS raw FROM events WHERE uid = ? AND type = 'PodSubmitted'"
        ' AND "offset" <= ?',
        [pod, events_offset],
    )
    raw = rows[0]["raw"] if rows else None
    return json.loads(raw) if raw else None


def _candidate(node: dict[str, Any], spec: dict[str, Any] | None) -> bool:
    if spec is None:
        return True
    allowed = spec.get("allowed_nodes")
    if allowed is not None and node["name"] not in allowed:
        return False
    labels = node.get("labels") or {}
    return all(labels.get(k) == v for k, v in (spec.get("node_selector") or {}).items())


def _who_holds(s: _Store, pod: str, cycle_id: str, t_ms: int) -> tuple[list[str], int | None]:
    """Lines naming the GPU holders on the pod's candidate nodes, and the free GPUs there (None: unknown)."""
    offset = _events_offset(s, cycle_id)
    has_events = s.rows("SELECT 1 FROM events LIMIT 1")
    if not has_events:
        return ["  (the store has no events, so who holds the GPUs is unknown)"], None
    holders = [h for h in _holders(s, offset, t_ms) if h["gpu_milli"] and h["pod"] != pod]
    nodes = _nodes(s, offset)
    spec = _pod_spec(s, pod, offset)
    cands = {n for n, raw in nodes.items() if raw.get("gpus") and _candidate(raw, spec)}
    restricted = spec is not None and (spec.get("allowed_nodes") is not None or spec.get("node_selector"))
    scope = "the nodes this pod may use" if restricted else "GPU nodes"
    held = [h for h in holders if h["node"] in cands]
    by_queue: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    by_node: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for h in held:
        q = str(h["queue"] or "?")
        by_queue[q][0] += int(h["gpu_milli"])
        by_queue[q][1] += 1
        by_node[str(h["node"])][q] += int(h["gpu_milli"])
    total = sum(int(nodes[n].get("gpus") or 0) for n in cands) * 1000
    used = sum(v[0] for v in by_queue.values())
    lines = [
        f"  Who holds the GPUs on {scope} ({len(cands)} node(s), {total / 1000:g} GPUs,"
        f" {used / 1000:g} held, {(total - used) / 1000:g} free):"
    ]
    for q, (milli, count) in sorted(by_queue.items(), key=lambda kv: (-kv[1][0], kv[0])):
        lines.append(f"    queue {q}: {milli / 1000:g} GPU in {count} pod(s)")
    shown = sorted(cands, key=lambda n: (-sum(by_node[n].values()), n))[:MAX_NODES_SHOWN]
    for n in shown:
        cap = int(nodes[n].get("gpus") or 0) * 1000
        parts = ", ".join(f"{q} {m / 1000:g}" for q, m in sorted(by_node[n].items())) or "nobody"
        lines.append(
            f"    node {n}: {cap / 1000:g} GPUs, free {(cap - sum(by_node[n].values())) / 1000:g}; held by {parts}"
        )
    if len(cands) > len(shown):
        lines.append(f"    … and {len(cands) - len(shown)} more node(s)")
    return lines, total - used


# --------------------------------------------------------------------------- the explanation


def _pending(s: _Store, e: Explanation, d: dict[str, Any]) -> None:
    details = json.loads(d["details"]) if d["details"] else {}
    e.reason = d["reason"]
    e.lines.append(f"Why: [{d['reason']}] {d['message']}")
    e.lines.append(f"  job {d['job']}: {details.get('pending_pods', len(d['pods'] or []))} pending pod(s)")
    requested = details.get("requested") or {}
    if requested:
        need = ", ".join(_amount(r, requested.get(r)) for r in RESOURCES if requested.get(r))
        e.lines.append(f"  How much is missing: the job's pending pods request {need or 'nothing'}")
        too_big = details.get("exceeds_every_node")
        if isinstance(too_big, dict):
            e.lines.append("    " + never_fits(too_big))
        elif "largest_free_gpus_on_a_node" in details and requested.get("gpu"):
            largest = float(details["largest_free_gpus_on_a_node"])
            e.lines.append(
                f"    the most free GPUs on any one node is {largest:g}; the job needs {requested['gpu'] / 1000:g}"
                f" GPU(s) for its next pods (short by {max(0.0, requested['gpu'] / 1000 - largest):g} on the best"
                " node)"
            )
    filters = details.get("filters") or {}
    if filters:
        # Per-node reasons by filter code (docs/filters.md): which constraint kept the nodes out.
        parts = ", ".join(
            f"{code} on {n} node(s)" for code, n in sorted(filters.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        e.lines.append(f"  Nodes ruled out by: {parts} (docs/filters.md)")
    e.lines.append("Queue standing in that cycle:")
    e.lines.extend(_standing(s, d["cycle_id"], d["queue"]))
    holders, free_milli = _who_holds(s, e.pod, d["cycle_id"], int(d["logical_time_ms"]))
    e.lines.extend(holders)
    e.lines.append("What to do: " + _advice(s, d, details, free_milli))


def _advice(s: _Store, d: dict[str, Any], details: dict[str, Any], free: int | None) -> str:
    """One actionable sentence for a pending job, from its reason and the numbers of its cycle."""
    rows = _queue_rows(s, d["cycle_id"], d["queue"])
    q = rows[0] if rows else None
    over = s.rows(
        "SELECT queue, gpu_allocated - gpu_fair_share AS excess FROM queue_cycles WHERE cycle_id = ?"
        " AND gpu_allocated > gpu_fair_share AND queue <> ? ORDER BY excess DESC, queue LIMIT 5",
        [d["cycle_id"], d["queue"]],
    )
    return advice(
        d["reason"] or "",
        details,
        (int(q["gpu_allocated"]), int(q["gpu_fair_share"])) if q is not None else None,
        free,
        [(str(r["queue"]), int(r["excess"])) for r in over],
    )


def never_fits(too_big: dict[str, Any]) -> str:
    """The sentence for a pod larger than every node (the ``exceeds_every_node`` detail of its decision)."""
    res = str(too_big.get("resource"))
    need, largest = int(too_big.get("requested") or 0), int(too_big.get("largest_node") or 0)
    return (
        f"no node can ever hold this pod: it requests {_amount(res, need)} and the largest node has"
        f" {_amount(res, largest)} in all"
    )


def advice(
    reason: str,
    details: dict[str, Any],
    queue_gpu: tuple[int, int] | None,
    free: int | None,
    over: list[tuple[str, int]],
) -> str:
    """One actionable sentence for a pending job (``explain``, ``eta`` and ``check`` share it).

    *reason* and *details* are its ``Unschedulable`` decision's; *queue_gpu* is its queue's (allocated,
    fair share) in milli-GPU (None: unknown queue); *free* the free milli-GPU on the nodes it may use (None:
    unknown); *over* the other queues above their GPU fair share, (name, excess milli-GPU), largest first.
    """
    if reason == "QueueDoesNotExist":
        return "create the queue, or set the pod's kai.scheduler/queue label to an existing leaf queue."
    if reason == "QueueNotLeaf":
        return "submit to one of the queue's leaf (child) queues."
    if reason == "NotReady":
        return "the gang is incomplete: create the rest of its pods (minMember) or lower minMember."
    if reason == "OverLimit":
        return "the queue is at its limit: wait for its own pods to finish, or raise the queue's limit."
    if reason == "NonPreemptibleOverQuota":
        return "use a preemptible priority class to go over quota, or raise the queue's quota."
    if reason == "SearchBudgetExhausted":
        return (
            f"the {details.get('action') or 'reclaim'} search was stopped by the engine's search budget before"
            " it found victims or proved there are none; it is tried again next cycle. If this persists, raise"
            " solver_job_budget / solver_action_budget in the engine config (docs/service.md)."
        )
    if reason == "TopologyConstraint":
        level = details.get("level")
        if not level:  # the constraint names a topology or level the cluster does not have
            return "fix the PodGroup's topologyConstraint: name an existing Topology and one of its levels."
        return (
            f"the whole gang must fit in one {level} domain (topology {details.get('topology')}) and none has"
            " room: wait for pods in one domain to finish, ask for a wider level or a preferred placement"
            " instead of a required one, or make the gang smaller (reclaim and preempt do not free a domain"
            " for it yet)."
        )
    too_big = details.get("exceeds_every_node")
    if isinstance(too_big, dict):
        res, cap = str(too_big.get("resource")), int(too_big.get("largest_node") or 0)
        return (
            f"{never_fits(too_big)}, so it will never start as it is: waiting, reclaim or a larger quota cannot"
            f" help. Ask for at most {_amount(res, cap)} per pod (split the work into more, smaller pods)"
            f" or add a node with at least {_amount(res, int(too_big.get('requested') or 0))}."
        )
    filters = details.get("filters") or {}
    placement = [c for c in filters if not c.startswith("Insufficient") and c != "TooManyPods"]
    if placement:
        return (
            f"the pod's own constraints rule nodes out ({', '.join(sorted(placement))}): relax them (affinity,"
            " spread, host ports, volumes, extended resources) or add nodes that satisfy them; evicting other"
            " queues' pods cannot help unless they are what a constraint refuses."
        )
    if queue_gpu is None:
        return "wait for capacity."
    allocated, fair = queue_gpu
    if allocated > fair:
        return (
            "the queue holds more than its fair share, so it cannot reclaim: wait for its own pods to"
            " finish, or raise its quota / overQuotaWeight."
        )
    need = int((details.get("requested") or {}).get("gpu") or 0)
    largest = details.get("largest_free_gpus_on_a_node")
    if need and free is not None and free >= need and largest is not None and largest * 1000 < need:
        return (
            f"{free / 1000:g} GPUs are free in total but at most {largest:g} on one node (fragmentation):"
            " ask for fewer GPUs per pod (more, smaller pods) or wait for a node to drain."
        )
    if need and allocated + need > fair:
        # Reclaim only takes back what keeps the reclaiming queue within its fair share (kai-spec §5).
        return (
            f"the job needs {need / 1000:g} GPUs, but reclaim only brings the queue up to its fair share of"
            f" {fair / 1000:g} GPUs (it holds {allocated / 1000:g}): the job starts when"
            " that much is free without evicting anyone, or once the queue's fair share grows (a larger quota or"
            " overQuotaWeight; with time-based fairshare (kValue > 0) it also grows as the other queues' recent"
            " usage does)."
        )
    if over:
        names = ", ".join(f"{name} (+{excess / 1000:g} GPU)" for name, excess in over)
        return (
            f"the queue is within its fair share; queues over theirs, which reclaim takes from once their pods"
            f" pass the min-runtime: {names}. Wait for the next cycles."
        )
    return (
        "the queue is within its fair share and no queue is over its own: the cluster is simply full;"
        " wait for pods to finish, or add capacity."
    )


def _evicted(s: _Store, e: Explanation, d: dict[str, Any]) -> None:
    msg = d["message"] or ""
    m = re.search(r"workload (\S+?)\.?$", msg)
    evictor = m.group(1) if m else None
    e.reason = d["action"]
    e.lines.append(
        f"Why: evicted from node {d['node']} by the {d['action']} action"
        + (f" on behalf of workload {evictor}" if evictor else "")
    )
    if msg:
        e.lines.append(f"  {msg}")
    placed = s.rows(
        "SELECT pod, queue, kind, action FROM decisions WHERE cycle_id = ? AND node = ?"
        " AND kind IN ('Bind', 'Pipeline') AND pod <> ? ORDER BY pod",
        [d["cycle_id"], d["node"], e.pod],
    )
    if placed:
        e.lines.append(f"  Placed on node {d['node']} in the same cycle (the beneficiaries):")
        for p in placed:
            e.lines.append(f"    {p['pod']} (queue {p['queue']}, {p['kind']} by {p['action']})")
    queues = [d["queue"], *sorted({p["queue"] for p in placed if p["queue"] != d["queue"]})]
    e.lines.append("Queue standing in that cycle:")
    shown: set[str] = set()
    for q in queues:
        e.lines.extend(_standing(s, d["cycle_id"], q, shown))


def explain(store: Path | str, pod: str, at_ms: int | None = None) -> Explanation:
    """Explain ``pod`` (``namespace/name`` or a unique ``name``) as of the latest cycle at or before ``at_ms``."""
    try:
        con = open_readonly(resolve_store(store))
    except (StoreError, duckdb.Error) as exc:
        raise ExplainError(str(exc)) from None
    try:
        return _explain(_Store(con), pod, at_ms)
    finally:
        con.close()


def _landing(d: dict[str, Any]) -> list[str]:
    """Where a gang with a topology constraint landed (the Bind / Pipeline decision's details.topology)."""
    raw = d.get("details")
    details = json.loads(raw) if isinstance(raw, str) else (raw or {})
    where = details.get("topology") if isinstance(details, dict) else None
    if not isinstance(where, dict):
        return []
    wanted = []
    if where.get("required_level"):
        wanted.append(f"requires one {where['required_level']}")
    if where.get("preferred_level"):
        met = "met" if where.get("within_preferred") else "not met: its pods span several"
        wanted.append(f"prefers one {where['preferred_level']} ({met})")
    domain = where.get("domain") or "no common domain"
    return [
        f"Topology {where.get('topology')}: the gang's placed pods are within {domain}; it {', '.join(wanted)}"
    ]


def _explain(s: _Store, pod_arg: str, at_ms: int | None) -> Explanation:
    """The answer for one pod at one time, from its decisions and intervals. Long on purpose: one pass from
    the pod's latest decisions to its state (pending, pipelined, bound, evicted, finished) and the words for
    it, every branch reading the same rows.
    """
    pod = s.resolve_pod(pod_arg)
    limit = at_ms if at_ms is not None else 2**62
    latest = s.rows(
        "SELECT cycle_id, logical_time_ms FROM decisions WHERE (pod = ? OR list_contains(pods, ?))"
        " AND logical_time_ms <= ? ORDER BY logical_time_ms DESC LIMIT 1",
        [pod, pod, limit],
    )
    if not latest:
        when = f" at or before {_time(limit)}" if at_ms is not None else ""
        raise ExplainError(f"pod {pod} is known, but no cycle mentions it{when} (not yet scheduled?)")
    cycle_id, t = str(latest[0]["cycle_id"]), int(latest[0]["logical_time_ms"])
    ds = s.rows(
        "SELECT * FROM decisions WHERE cycle_id = ? AND (pod = ? OR list_contains(pods, ?)) ORDER BY seq",
        [cycle_id, pod, pod],
    )
    if ds and all(d["kind"] == "Unschedulable" for d in ds):
        # The store keeps a pending decision once, at the cycle it began; it held until its interval
        # ended. Explain it as of the last cycle at or before the asked time within that interval.
        asof = s.rows(
            "SELECT c.cycle_id, c.logical_time_ms FROM pending_intervals p JOIN cycles c"
            " ON c.seq >= p.start_seq AND (p.end_seq IS NULL OR c.seq < p.end_seq)"
            " WHERE p.cycle_id = ? AND p.job = ? AND c.logical_time_ms <= ?"
            " ORDER BY c.seq DESC LIMIT 1",
            [cycle_id, ds[0]["job"], limit],
        )
        if asof:
            cycle_id, t = str(asof[0]["cycle_id"]), int(asof[0]["logical_time_ms"])
            ds = [{**d, "cycle_id": cycle_id, "logical_time_ms": t} for d in ds]
    by_kind = {str(d["kind"]): d for d in ds}
    queue = next((d["queue"] for d in ds if d["queue"]), None)
    # What happened to the pod after that cycle, per the events (bound, finished, deleted).
    later = s.rows(
        "SELECT type, at_ms, raw->>'node' AS node FROM events WHERE uid = ? AND at_ms <= ?"
        " AND type IN ('PodBound', 'PodReleasing', 'PodFinished', 'PodDeleted')"
        ' AND "offset" > ? ORDER BY "offset" DESC',
        [pod, limit, _events_offset(s, cycle_id)],
    )
    if "Evict" in by_kind:
        state = "evicted"
    elif "Bind" in by_kind:
        state = "bound"
    elif "Pipeline" in by_kind:
        state = "pipelined"
    else:
        state = "pending"
    later_types = {str(r["type"]) for r in later}
    if later and later[0]["type"] in ("PodFinished", "PodDeleted") and state != "evicted":
        # A pod that ran to completion is deleted afterwards: "finished" says more than "deleted".
        state = "finished" if "PodFinished" in later_types else "deleted"
    e = Explanation(pod=pod, state=state, cycle_id=cycle_id, logical_time_ms=t, queue=queue)
    e.lines.append(f"Pod {pod} (queue {queue}): {state.upper()} as of cycle {cycle_id} at {_time(t)}")
    if "Evict" in by_kind:
        _evicted(s, e, by_kind["Evict"])
        for k in ("Bind", "Pipeline"):
            if k in by_kind:
                d = by_kind[k]
                e.lines.append(
                    f"  In the same cycle it was re-placed ({k}) on node {d['node']} by {d['action']}"
                )
    elif "Bind" in by_kind:
        d = by_kind["Bind"]
        devices = ",".join(str(i) for i in d["gpu_devices"] or [])
        gpu = ""
        if devices:
            portion = d["gpu_milli_per_device"] or 1000
            gpu = f", GPU device(s) {devices} ({portion / 1000:g} of each)"
        e.lines.append(f"Placed: node {d['node']}{gpu}, by the {d['action']} action")
        e.lines.extend(_landing(d))
        e.lines.append("Queue standing in that cycle:")
        e.lines.extend(_standing(s, cycle_id, queue))
    elif "Pipeline" in by_kind:
        d = by_kind["Pipeline"]
        e.lines.append(
            f"Why: pipelined to node {d['node']} by the {d['action']} action: it waits for pods being evicted"
            " there to finish releasing their resources, then a later cycle binds it"
        )
        e.lines.extend(_landing(d))
        e.lines.append("Queue standing in that cycle:")
        e.lines.extend(_standing(s, cycle_id, queue))
    else:
        _pending(s, e, by_kind["Unschedulable"])
    if later:
        ev = next((r for r in later if r["type"] == "PodFinished"), later[0])
        what = {
            "PodBound": f"bound to {ev['node']}",
            "PodReleasing": "releasing",
            "PodFinished": "finished",
            "PodDeleted": "deleted",
        }.get(str(ev["type"]), str(ev["type"]))
        e.lines.append(f"Afterwards (events): {what} at {_time(int(ev['at_ms']))}")
    prior = s.rows(
        "SELECT logical_time_ms, action, node FROM decisions WHERE kind = 'Evict' AND pod = ?"
        " AND logical_time_ms < ? ORDER BY logical_time_ms DESC LIMIT 1",
        [pod, t],
    )
    if prior:
        p = prior[0]
        e.lines.append(
            f"Earlier: evicted from node {p['node']} by {p['action']} at {_time(int(p['logical_time_ms']))}"
            f" (hourglass explain {pod} --at {p['logical_time_ms']})"
        )
    return e


# --------------------------------------------------------------------------- CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``explain`` subcommand's arguments."""
    p.add_argument("pod", help="the pod: namespace/name, or name when it is unique")
    p.add_argument(
        "--store",
        required=True,
        help="a run directory (hourglass simulate --out) or an audit .duckdb file (hourglass sql's store)",
    )
    p.add_argument(
        "--at",
        default=None,
        help="explain as of this time: logical ms, a duration (90s, 2h) or an ISO date-time (default: latest)",
    )


def run_cli(args: argparse.Namespace) -> int:
    """``hourglass explain``: print the explanation; exit 2 with a message for an unknown pod or bad input."""
    try:
        at = parse_time(args.at) if args.at is not None else None
        e = explain(args.store, args.pod, at)
    except ExplainError as exc:
        print(f"explain: {exc}", file=sys.stderr)
        return 2
    from analytics.terminal import output_width, wrap_lines

    sys.stdout.write("".join(f"{line}\n" for line in wrap_lines(e.lines, output_width(sys.stdout))))
    return 0
