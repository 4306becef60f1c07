"""Everything a session holds, in comparable form: for tests that compare two sessions."""

from __future__ import annotations

from typing import Any

from scheduler.engine.session import Session


def fingerprint(ssn: Session) -> dict[str, Any]:
    """Everything a session holds when it opens, in comparable form."""
    fi = ssn.free_index

    def nz(d: dict[str, int]) -> dict[str, int]:
        return {k: v for k, v in d.items() if v}

    return {
        "now": ssn.now_ms,
        "state": ssn.state,
        "nodes": [
            (
                n.name,
                n.index,
                n.spec,
                n.alloc,
                n.rel,
                n.pipe,
                n.pods,
                n.dev_alloc,
                n.dev_rel,
                n.dev_pipe,
                n.dev_shared,
                nz(n.ext_alloc),
                nz(n.ext_rel),
                nz(n.ext_pipe),
                n.ports_held,
                n.ports_rel,
                (n.foreign_gpu_milli, n.foreign_cpu, n.foreign_memory, n.foreign_pods),
            )
            for n in ssn.nodes
        ],
        "tasks": [
            (
                t.uid,
                t.pod,
                t.job.uid,
                t.status,
                t.node.name if t.node else None,
                t.devices,
                t.portion,
                t.virtual,
                t.index,
            )
            for t in ssn.tasks
        ],
        "jobs": [
            (
                j.uid,
                j.spec,
                j.index,
                j.queue.name if j.queue else None,
                [t.uid for t in j.tasks],
                j.fit_errors,
                j.last_start_ms,
                j.stale_since_ms,
            )
            for j in ssn.jobs
        ],
        "job_by_uid": sorted(ssn.job_by_uid),
        "queues": [
            (
                q.name,
                q.parent.name if q.parent else None,
                [c.name for c in q.children],
                [j.uid for j in q.jobs],
                q.allocated,
                q.allocated_np,
                q.requested,
                q.fair_share,
                q.share,
                [q.allocatable_share(r) for r in range(3)],
            )
            for q in ssn.queues.values()
        ],
        "gated": [p.uid for p in ssn.gated],
        "anti": ssn.anti_present,
        "soft": ssn.soft_present,
        "total": ssn.total,
        "min_gpu_memory": ssn.min_gpu_memory,
        "shares": ssn.shares,
        "free_index": (
            [n.name for n in fi.by_rank],
            fi.rank,
            fi.buckets,
            fi.level,
            fi.shared,
            fi.cpu,
            fi.cpu_at,
        ),
        "unclaimed": ssn.unclaimed_gpu_milli(),
        "counters": (ssn.version, ssn.commits, ssn.decisions, dict(ssn.work), dict(ssn.last_why)),
        "caches": (ssn.action_cache, ssn.pred_cache, ssn.static_cache),
        "pod_index": list(ssn.pod_index().entries.items()),
        "extra": sorted(set(vars(ssn))),
    }
