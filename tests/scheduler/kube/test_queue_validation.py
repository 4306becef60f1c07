"""KAI's Queue admission rules (``scheduler.kube.queue_validation``) and their AdmissionReview answers.

The first four cases are KAI v0.17.0's own (``pkg/admission/webhook/queuehooks/queue_validator_test.go``:
"should reject queue without resources", "should accept queue with resources", "should reject deletion of
queue with children", "should allow deletion of queue without children"). KAI has no test of the opt-in
quota warnings; those cases follow ``validateParentChildQuota`` / ``validateChildrenQuotaSum`` line by line,
messages included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from scheduler.kube.queue_validation import MISSING_RESOURCES, QueueLookup, Verdict, validate
from scheduler.kube.webhook import ReviewError, queue_review


def queue(
    name: str,
    parent: str | None = None,
    *,
    cpu: float = 0,
    gpu: float = 0,
    memory: float = 0,
    bare: bool = False,
) -> dict[str, Any]:
    """A Queue with the given quotas (``bare``: no ``spec.resources`` at all)."""
    spec: dict[str, Any] = {}
    if parent:
        spec["parentQueue"] = parent
    if not bare:
        spec["resources"] = {"cpu": {"quota": cpu}, "gpu": {"quota": gpu}, "memory": {"quota": memory}}
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


@dataclass
class Queues:
    """The Queues the API server holds (a :class:`QueueLookup`)."""

    items: Sequence[Mapping[str, Any]] = ()

    def get(self, name: str) -> Mapping[str, Any] | None:
        return next((q for q in self.items if q["metadata"]["name"] == name), None)

    def children(self, name: str) -> Sequence[Mapping[str, Any]]:
        return sorted(
            (q for q in self.items if q["spec"].get("parentQueue") == name),
            key=lambda q: q["metadata"]["name"],
        )


PARENT = queue("parent-queue", cpu=1000, gpu=4, memory=8192)


# (case, operation, object, oldObject, the Queues in the cluster, quota validation on, verdict)
# fmt: off
CASES: list[tuple[str, str, Any, Any, list[dict[str, Any]], bool, Verdict]] = [
    # KAI's queue_validator_test.go
    ("kai: reject queue without resources", "CREATE", queue("test-queue", bare=True), None, [], False,
     Verdict(False, MISSING_RESOURCES, (MISSING_RESOURCES,))),
    ("kai: accept queue with resources", "CREATE", queue("test-queue", cpu=1000, gpu=4, memory=8192), None,
     [], False, Verdict(True)),
    ("kai: reject deletion of queue with children", "DELETE", None, PARENT,
     [PARENT, queue("child-1", "parent-queue"), queue("child-2", "parent-queue")], False,
     Verdict(False, "cannot delete queue parent-queue: it has child queues [child-1 child-2]")),
    ("kai: allow deletion of queue without children", "DELETE", None, queue("leaf-queue", "parent-queue"),
     [PARENT, queue("leaf-queue", "parent-queue")], False, Verdict(True)),
    # the update path refuses a missing spec.resources too
    ("update without resources", "UPDATE", queue("q", bare=True), queue("q"), [], True,
     Verdict(False, MISSING_RESOURCES, (MISSING_RESOURCES,))),
    # quota warnings are opt-in: the same over-quota child passes silently when off
    ("over-quota child, validation off", "CREATE", queue("c", "parent-queue", gpu=8), None, [PARENT], False,
     Verdict(True)),
    ("child within its parent", "CREATE", queue("c", "parent-queue", cpu=500, gpu=2, memory=4096), None,
     [PARENT], True, Verdict(True)),
    ("child above its parent in every resource", "CREATE",
     queue("c", "parent-queue", cpu=1500, gpu=4.5, memory=9000), None, [PARENT], True,
     Verdict(True, "", (
         "child queue CPU quota (1500) exceeds parent queue parent-queue CPU quota (1000)",
         "total children CPU quota (1500) exceeds parent queue parent-queue CPU quota (1000)",
         "child queue GPU quota (4.50) exceeds parent queue parent-queue GPU quota (4.00)",
         "child queue Memory quota (9000) exceeds parent queue parent-queue Memory quota (8192)",
     ))),
    # KAI sums only CPU over the siblings when a child is written
    ("siblings' CPU sum", "CREATE", queue("c", "parent-queue", cpu=600, gpu=3), None,
     [PARENT, queue("b", "parent-queue", cpu=600, gpu=3)], True,
     Verdict(True, "", ("total children CPU quota (1200) exceeds parent queue parent-queue CPU quota (1000)",))),
    ("a child's own old quota is not counted twice", "UPDATE", queue("c", "parent-queue", cpu=900),
     queue("c", "parent-queue", cpu=100), [PARENT, queue("c", "parent-queue", cpu=100)], True, Verdict(True)),
    # a parent lowered below its children
    ("parent lowered under its children", "UPDATE", queue("parent-queue", cpu=500, gpu=1, memory=1024), PARENT,
     [PARENT, queue("a", "parent-queue", cpu=600, gpu=1, memory=512),
      queue("b", "parent-queue", cpu=100, gpu=0.5, memory=512)], True,
     Verdict(True, "", (
         "child queue a CPU quota (600) exceeds parent CPU quota (500)",
         "total children CPU quota (700) exceeds parent CPU quota (500)",
         "total children GPU quota (1.50) exceeds parent GPU quota (1.00)",
     ))),
    ("parent lowered, validation off", "UPDATE", queue("parent-queue", gpu=1), PARENT,
     [PARENT, queue("a", "parent-queue", gpu=4)], False, Verdict(True)),
    # differences from KAI, documented in the module: unlimited is unlimited; a missing parent warns
    ("unlimited parent", "CREATE", queue("c", "parent-queue", cpu=5000, gpu=16, memory=1),
     None, [queue("parent-queue", cpu=-1, gpu=-1, memory=-1)], True, Verdict(True)),
    ("unlimited child under a finite parent", "CREATE", queue("c", "parent-queue", gpu=-1), None, [PARENT], True,
     Verdict(True, "", ("child queue GPU quota (unlimited) exceeds parent queue parent-queue GPU quota (4.00)",))),
    ("missing parent", "CREATE", queue("c", "nowhere", gpu=1), None, [], True,
     Verdict(True, "", ("parent queue nowhere does not exist",))),
]
# fmt: on


@pytest.mark.parametrize(
    ("case", "operation", "obj", "old", "cluster", "quota", "want"), CASES, ids=[c[0] for c in CASES]
)
def test_kai_queue_rules(
    case: str,
    operation: str,
    obj: dict[str, Any] | None,
    old: dict[str, Any] | None,
    cluster: list[dict[str, Any]],
    quota: bool,
    want: Verdict,
) -> None:
    assert validate(operation, obj, old, Queues(cluster), quota_validation=quota) == want, case


def _review(operation: str, obj: Any, old: Any = None) -> dict[str, Any]:
    request: dict[str, Any] = {
        "uid": "u-1",
        "kind": {"group": "scheduling.run.ai", "version": "v2", "kind": "Queue"},
        "operation": operation,
        "object": obj,
    }
    if old is not None:
        request["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def test_review_answers_warnings_and_denials_in_admission_form() -> None:
    cluster = Queues([PARENT, queue("a", "parent-queue", gpu=4)])
    warned = queue_review(_review("CREATE", queue("c", "parent-queue", gpu=5)), lambda: cluster, True)
    assert warned["response"] == {
        "uid": "u-1",
        "allowed": True,
        "warnings": ["child queue GPU quota (5.00) exceeds parent queue parent-queue GPU quota (4.00)"],
    }
    denied = queue_review(_review("DELETE", None, PARENT), lambda: cluster)
    assert denied["response"]["allowed"] is False
    assert (
        denied["response"]["status"]["message"] == "cannot delete queue parent-queue: it has child queues [a]"
    )
    assert "warnings" not in denied["response"]


def test_queues_that_cannot_be_read_deny_with_the_reason() -> None:
    def down() -> QueueLookup:
        raise ConnectionError("apiserver unreachable")

    answer = queue_review(_review("CREATE", queue("c", "parent-queue", gpu=1)), down, True)
    assert answer["response"]["allowed"] is False
    assert "cannot read the Queues" in answer["response"]["status"]["message"]
    assert "apiserver unreachable" in answer["response"]["status"]["message"]


def test_a_body_that_is_not_an_admission_review_is_refused() -> None:
    with pytest.raises(ReviewError):
        queue_review({"request": {"kind": {"kind": "Queue"}}}, lambda: Queues())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--enable-quota-validation"], "--enable-quota-validation needs --validate-queues"),
        (
            ["--validate-queues", "--kubeconfig", "/nonexistent/kubeconfig"],
            "no kubeconfig file at /nonexistent",
        ),
    ],
    ids=["quota-without-queues", "no-kubeconfig"],
)
def test_the_command_refuses_queue_options_it_cannot_serve(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from scheduler.kube.webhook import run_cli
    from tests.support.helm_chart import parse_cli

    args = parse_cli(["webhook", "--tls-cert", "c.pem", "--tls-key", "k.pem", *argv])
    assert run_cli(args) == 2
    assert message in capsys.readouterr().err
