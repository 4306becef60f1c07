"""``hourglass check -f pod.yaml|podgroup.yaml --log LOG``: would this be scheduled right now, and where?

Nothing is submitted. The log is folded to its end (as ``replay`` and ``eta`` fold it), the file's objects
are translated with ingest's own translation (:mod:`ingest.kube.translate`: the events ``hourglass ingest`` would
write for them, created at the end of the log) and folded into a copy of that state, and the engine runs
one cycle on it at the next cycle time; the result is read and thrown away.

The file holds Pods and PodGroups (several YAML documents, or a ``List``). A pod names its PodGroup with
KAI's ``pod-group-name`` annotation (a PodGroup of the file or one already in the log); without it, it gets
the group KAI's pod-grouper gives a bare pod (its own, in the queue of its ``kai.scheduler/queue`` label).
A PodGroup needs its pods in the same file: a group alone says nothing about what it asks for.

The answer: each pod's placement (``Bind``: node and GPU devices; ``Pipeline``: onto capacity that pods
being evicted still hold), the evictions the cycle would make for it, or why not (the ``Unschedulable``
reason, message and per-node filters, and the same advice as ``hourglass explain``), the queue's standing,
and, when it does not fit now and the log has finished runs to learn from, when it would start
(``hourglass eta``'s forward runs on the same state).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from analytics.forecast.eta import (
    Eta,
    EtaError,
    Setting,
    Tracker,
    add_step_argument,
    estimate,
    fairshare_config,
    fold_log,
    format_time,
    free_gpu_milli,
    gpu_holders,
    next_cycle_ms,
    queue_standing,
    step_ms,
)
from analytics.reports.explain import advice
from fairshare.config import FairshareConfig
from ingest import events as ev
from ingest.kube.podgrouper import plan_pod_group, podgroup_manifest
from ingest.kube.translate import InvalidObject, pod_group_annotation, pod_submitted, podgroup_upserted
from scheduler.engine.cycle import result_state, run_cycle
from scheduler.engine.record.decisions import Decision

__all__ = ["CheckError", "CheckResult", "add_arguments", "check", "objects_from_yaml", "run_cli"]


class CheckError(Exception):
    """A file that cannot be read or translated, or objects that clash with the log."""


@dataclass
class CheckResult:
    """One cycle's verdict on the file's pods."""

    pods: list[str]
    job: str
    queue: str | None
    cycle_ms: int
    outcome: str  # fits | pipelined | partial (an elastic job's extra pods wait) | unschedulable
    placements: dict[str, dict[str, Any]] = field(default_factory=dict)  # pod -> node, devices, action
    evictions: list[dict[str, Any]] = field(default_factory=list)
    reason: str | None = None
    message: str | None = None
    filters: dict[str, int] = field(default_factory=dict)
    advice: str | None = None
    queue_gpu: dict[str, float] | None = None  # allocated / fair share in GPUs, after the cycle
    holders: dict[str, dict[str, float]] = field(default_factory=dict)  # queue -> gpus, pods (not placed)
    eta: dict[str, Any] | None = None
    other_binds: int = 0  # pods already pending that the same cycle would place

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` object."""
        return asdict(self)

    def text(self) -> str:
        """What a user reads."""
        when = format_time(self.cycle_ms, self.cycle_ms)
        who = self.pods[0] if len(self.pods) == 1 else f"{len(self.pods)} pods"
        head = f"{who} (job {self.job}, queue {self.queue})"
        lines = []
        if self.outcome == "fits":
            lines.append(f"{head} would be scheduled now (cycle at {when}):")
        elif self.outcome == "pipelined":
            lines.append(
                f"{head} would be placed now (cycle at {when}) on capacity that evicted pods still hold; it"
                " is bound once they have released it:"
            )
        elif self.outcome == "partial":
            lines.append(
                f"{head}: {len(self.placements)} of {len(self.pods)} pods would be placed now (cycle at {when}),"
                f" the rest wait: [{self.reason}] {self.message}"
            )
        else:
            lines.append(
                f"{head} would NOT be scheduled now (cycle at {when}): [{self.reason}] {self.message}"
            )
        for pod, p in self.placements.items():
            devices = ""
            if p["gpu_devices"]:
                portion = p["gpu_milli_per_device"] or 1000
                devices = f" (GPU devices {','.join(map(str, p['gpu_devices']))}, {portion / 1000:g} of each)"
            verb = "fits on" if p["kind"] == "Bind" else "is pipelined to"
            lines.append(f"  {pod} {verb} node {p['node']}{devices}, by the {p['action']} action")
        if self.evictions:
            lines.append(f"  It would evict {len(self.evictions)} pod(s):")
            for e in self.evictions:
                lines.append(f"    {e['pod']} (queue {e['queue']}) on node {e['node']}, by {e['action']}")
        if self.filters:
            parts = ", ".join(
                f"{c} on {n} node(s)" for c, n in sorted(self.filters.items(), key=lambda kv: (-kv[1], kv[0]))
            )
            lines.append(f"  Nodes ruled out by: {parts} (docs/filters.md)")
        if self.queue_gpu is not None:
            q = self.queue_gpu
            lines.append(
                f"  Queue {self.queue}: {q['allocated']:g} GPUs allocated, fair share {q['fair_share']:g}"
                + (" (after this cycle)" if self.outcome != "unschedulable" else "")
            )
        if self.holders:
            who = ", ".join(
                f"queue {q} {h['gpus']:g} in {h['pods']:g} pod(s)" for q, h in self.holders.items()
            )
            lines.append(f"  Who holds the GPUs on the nodes it may use: {who}")
        if self.advice:
            lines.append(f"What it would take: {self.advice}")
        if self.eta is not None:
            lines.append("When (hourglass eta on the same state): " + self.eta["summary"])
        if self.other_binds:
            lines.append(f"  (the same cycle would also place {self.other_binds} pod(s) already pending)")
        lines.append("Nothing was submitted.")
        return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the file


def objects_from_yaml(text: str, source: str = "the file") -> list[dict[str, Any]]:
    """The Pods and PodGroups of a YAML text (documents and ``List`` items), in file order."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise CheckError(f"{source}: not valid YAML: {exc}") from None
    out: list[dict[str, Any]] = []
    for d in docs:
        if not isinstance(d, dict):
            raise CheckError(f"{source}: every document must be a Kubernetes object (a mapping)")
        items = d.get("items") if d.get("kind") == "List" else [d]
        for obj in items or []:
            kind = obj.get("kind") if isinstance(obj, dict) else None
            if kind not in ("Pod", "PodGroup"):
                raise CheckError(
                    f"{source}: can check Pods and PodGroups, not {kind or 'an object without kind'}"
                )
            name = (obj.get("metadata") or {}).get("name")
            if not name:
                raise CheckError(f"{source}: a {kind} without metadata.name")
            obj.setdefault("metadata", {}).setdefault("namespace", "default")
            out.append(obj)
    if not out:
        raise CheckError(f"{source}: no Pod or PodGroup in it")
    return out


def _events(objs: list[dict[str, Any]], tr: Tracker, at_ms: int) -> tuple[list[ev.EventBase], list[str]]:
    """The events ingest would write for *objs* (created at *at_ms*), and the new pods' uids."""
    out: list[ev.EventBase] = []
    groups: dict[str, ev.PodGroupUpserted] = {}
    try:
        for obj in objs:
            if obj["kind"] == "PodGroup":
                g = podgroup_upserted(obj, at_ms).model_copy(update={"created_at_ms": at_ms})
                groups[f"{g.namespace}/{g.name}"] = g
                out.append(g)
        pods: list[str] = []
        for obj in objs:
            if obj["kind"] != "Pod":
                continue
            meta = obj["metadata"]
            ns, name = str(meta["namespace"]), str(meta["name"])
            uid = f"{ns}/{name}"
            if uid in tr.builder.pods:
                raise CheckError(
                    f"pod {uid} already exists in the log: ask `hourglass eta` or `hourglass explain`"
                )
            group = pod_group_annotation(obj)
            if group is None:
                # A bare pod's group is named after its uid, which the API server has not given yet.
                meta.setdefault("uid", "check")
                plan = plan_pod_group(obj, [])
                g = podgroup_upserted(podgroup_manifest(plan), at_ms).model_copy(
                    update={"created_at_ms": at_ms}
                )
                group = g.name
                groups[f"{ns}/{group}"] = g
                out.append(g)
            elif f"{ns}/{group}" not in groups and f"{ns}/{group}" not in tr.builder.jobs:
                raise CheckError(
                    f"pod {uid} names pod group {group!r}, which is neither in the file nor in the log"
                )
            out.append(pod_submitted(obj, group, at_ms).model_copy(update={"created_at_ms": at_ms}))
            pods.append(uid)
    except InvalidObject as exc:
        raise CheckError(str(exc)) from None
    if not pods:
        raise CheckError(
            "the file has PodGroups but no Pods: a group alone says nothing about what it asks for; add its"
            " pods (with the pod-group-name annotation) to the file"
        )
    return out, pods


# --------------------------------------------------------------------------- the check


def _placement(d: Decision) -> dict[str, Any]:
    return {
        "kind": d.kind,
        "node": d.node,
        "gpu_devices": list(d.gpu_devices),
        "gpu_milli_per_device": d.gpu_milli_per_device,
        "action": d.action,
    }


def check_state(
    tr: Tracker, objs: list[dict[str, Any]], now_ms: int, s: Setting, with_eta: bool = True
) -> CheckResult:
    """Run one cycle on *tr*'s state plus *objs* (created at the end of the log); *tr* is not changed."""
    t = next_cycle_ms(now_ms, s)
    hypo = tr.fork()
    events, pods = _events(objs, hypo, now_ms)
    offset = hypo.builder.offset
    for e in events:
        offset += 1
        hypo.apply(offset, e)
    mine = set(pods)
    state = hypo.builder.snapshot()
    known = {p.uid for p in state.pods}
    missing = [p for p in pods if p not in known]
    if missing:
        raise CheckError(f"the engine does not see {', '.join(missing)} (its pod group was not accepted)")
    record, ssn = run_cycle(state, s.config, t, s.usage, s.usage_id)
    jobs = {p.job for p in state.pods if p.uid in mine}
    queue = hypo.pods[pods[0]].queue
    res = CheckResult(pods, ", ".join(sorted(jobs)), queue, t, "unschedulable")
    placed = {d.pod: d for d in record.decisions if d.kind in ("Bind", "Pipeline") and d.pod in mine}
    unsched = [d for d in record.decisions if d.kind == "Unschedulable" and mine & set(d.pods)]
    res.other_binds = sum(1 for d in record.decisions if d.kind == "Bind" and d.pod not in mine)
    for uid in pods:
        if uid in placed:
            res.placements[uid] = _placement(placed[uid])
    evicts = [d for d in record.decisions if d.kind == "Evict"]
    for_us = [d for d in evicts if any((d.message or "").rstrip(".").endswith(j) for j in jobs)]
    for d in for_us or (evicts if placed else []):
        res.evictions.append({"pod": d.pod, "queue": d.queue, "node": d.node, "action": d.action})
    mine_q, over = queue_standing(record, queue)
    if mine_q is not None:
        res.queue_gpu = {"allocated": mine_q[0] / 1000, "fair_share": mine_q[1] / 1000}
    if not unsched and len(placed) == len(pods):
        res.outcome = "fits" if all(d.kind == "Bind" for d in placed.values()) else "pipelined"
        return res
    if placed:
        res.outcome = "partial"  # an elastic job: its minMember is placed, the extra pods wait
    waiting = next(u for u in pods if u not in placed)
    if unsched:
        why = unsched[0]
        res.reason, res.message = why.reason, why.message
        res.filters = dict((why.details or {}).get("filters") or {})
        pod = next(p for p in state.pods if p.uid == waiting)
        after = result_state(ssn)  # free GPUs as the cycle left them
        res.advice = advice(why.reason or "", why.details, mine_q, free_gpu_milli(after, pod), over)
        res.holders = {
            q: {"gpus": milli / 1000, "pods": n} for q, (milli, n) in gpu_holders(after, pod).items()
        }
    if with_eta and len(hypo.model):
        try:
            answer: Eta = estimate(hypo, waiting, now_ms, s)
        except EtaError:
            return res
        res.eta = {**answer.to_json(), "summary": answer.text().splitlines()[0].split(": ", 1)[-1]}
    return res


def check(
    file: str | Path,
    log: str,
    *,
    engine_config: str | None = None,
    topic_prefix: str | None = None,
    with_eta: bool = True,
    step_ms: int | None = None,
    fairshare: FairshareConfig | None = None,
) -> CheckResult:
    """``hourglass check -f FILE --log LOG`` (*step_ms*: see ``hourglass eta --step``)."""
    path = Path(file)
    try:
        text = sys.stdin.read() if str(file) == "-" else path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CheckError(f"{path}: cannot read: {exc.strerror or exc}") from None
    objs = objects_from_yaml(text, str(file))
    try:
        tr, now, setting = fold_log(
            log, engine_config=engine_config, topic_prefix=topic_prefix, step_ms=step_ms, fairshare=fairshare
        )
    except EtaError as exc:
        raise CheckError(str(exc)) from None
    return check_state(tr, objs, now, setting, with_eta)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``check`` subcommand's arguments."""
    p.add_argument(
        "-f", "--file", required=True, metavar="FILE", help="pod.yaml or podgroup.yaml (- = stdin)"
    )
    p.add_argument(
        "--log",
        required=True,
        metavar="LOG",
        help="a run directory (hourglass simulate --out), an embedded log directory or kafka://HOST:PORT",
    )
    p.add_argument("--json", action="store_true", help="print a JSON object instead of sentences")
    p.add_argument(
        "--no-eta", action="store_true", help="when it does not fit, do not estimate when it would"
    )
    add_step_argument(p)
    p.add_argument(
        "--engine-config", metavar="FILE", help="for a log: the engine config file `hourglass run` used"
    )
    p.add_argument("--topic-prefix", default=None, help="for a log: PREFIX.events, PREFIX.decisions, ...")


def run_cli(args: argparse.Namespace) -> int:
    """``hourglass check``: exit 0 when it would be placed now, 1 when not, 2 on bad input."""
    try:
        res = check(
            args.file,
            args.log,
            engine_config=args.engine_config,
            topic_prefix=args.topic_prefix,
            with_eta=not args.no_eta,
            step_ms=step_ms(args),
            fairshare=fairshare_config(args),
        )
    except (CheckError, EtaError) as exc:
        print(f"check: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(res.to_json(), indent=2))
    else:
        from analytics.terminal import output_width, wrap_lines

        lines = wrap_lines(res.text().splitlines(), output_width(sys.stdout))
        sys.stdout.write("".join(f"{line}\n" for line in lines))
    return 0 if res.outcome != "unschedulable" else 1
