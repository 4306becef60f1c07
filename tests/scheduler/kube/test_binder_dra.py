"""The binder and DRA claims: a Bind whose decision says the pod claims DRA GPUs allocates the claims before
the binding (kube-scheduler's dynamicresources PreBind order), a claim that cannot be allocated is a
FailedBinding dead letter without a binding, and a refused binding undoes the allocation (its Unreserve)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ingest.filelog import FileLog
from ingest.kube.client import KubeError
from ingest.log import DEFAULT_TOPICS
from scheduler.kube.binder import Binder, BindPod, RetryPolicy, plan
from scheduler.kube.binder import Memory as BinderMemory
from scheduler.kube.claims import ClaimError
from tests.support.cycle_records import bind, record

FAST = RetryPolicy(attempts=2, base_s=0.0)


class _Kube:
    """Records the calls; ``fail_claims`` / ``fail_bind`` make those calls fail."""

    def __init__(self, fail_claims: bool = False, fail_bind: int | None = None) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.fail_claims, self.fail_bind = fail_claims, fail_bind

    def allocate_claims(self, namespace: str, name: str, node: str) -> list[str]:
        self.calls.append(("allocate", name, node))
        if self.fail_claims:
            raise ClaimError("dra_no_free_device", f"node {node} has too few free devices")
        return [f"{name}-gpu"]

    def undo_claims(self, namespace: str, name: str, claims: list[str]) -> None:
        self.calls.append(("undo", name, *claims))

    def bind(self, namespace: str, name: str, node: str, annotations: Any) -> None:
        self.calls.append(("bind", name, node))
        if self.fail_bind is not None:
            raise KubeError(self.fail_bind, "refused")

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


def _dra_bind(pod: str) -> Any:
    d = bind(pod, "n1")
    return d.model_copy(update={"details": {"dra": {"dra.hourglass.dev/gpu.example.com": 1}}})


def _run(tmp_path: Path, kube: _Kube) -> Any:
    log = FileLog(tmp_path / "log")
    log.append(DEFAULT_TOPICS.decisions, None, record([_dra_bind("ns/p"), bind("ns/plain", "n1")]).dumps())
    stats = Binder(log, kube, retry=FAST).run(stop_when_idle=True)  # type: ignore[arg-type]
    return stats, [r.value for r in log.read(DEFAULT_TOPICS.deadletter, 0, 100)]


def test_plan_marks_only_binds_that_claim_dra_devices() -> None:
    p = plan(record([_dra_bind("ns/p"), bind("ns/plain", "n1")]), BinderMemory(), 0.0)
    binds = [a for a in p.actions if isinstance(a, BindPod)]
    assert [(b.name, b.dra) for b in binds] == [("p", True), ("plain", False)]


def test_claims_are_allocated_before_the_binding(tmp_path: Path) -> None:
    kube = _Kube()
    stats, dead = _run(tmp_path, kube)
    assert sorted(kube.calls) == [("allocate", "p", "n1"), ("bind", "p", "n1"), ("bind", "plain", "n1")]
    assert kube.calls.index(("allocate", "p", "n1")) < kube.calls.index(("bind", "p", "n1"))
    assert (stats.bound, dead) == (2, [])


def test_a_claim_that_cannot_be_allocated_is_a_dead_letter_and_no_binding(tmp_path: Path) -> None:
    kube = _Kube(fail_claims=True)
    _, dead = _run(tmp_path, kube)
    assert ("bind", "p", "n1") not in kube.calls and ("bind", "plain", "n1") in kube.calls
    assert len(dead) == 1 and b"dra_no_free_device" in dead[0]


def test_a_refused_binding_undoes_the_allocation(tmp_path: Path) -> None:
    kube = _Kube(fail_bind=403)
    _run(tmp_path, kube)
    assert ("undo", "p", "p-gpu") in kube.calls and not any(
        c[0] == "undo" and c[1] == "plain" for c in kube.calls
    )
