"""Kubernetes ingest (``hourglass ingest``): list + watch the cluster, append contract events to the log.

Watched: Nodes, Pods whose ``spec.schedulerName`` is ours (field selector), bound non-terminal pods of every
other scheduler (``ForeignPodUpserted``: they hold capacity the engine must see), Queues
(``scheduling.run.ai/v2``), PodGroups (``scheduling.run.ai/v2alpha2``) and KAI's Topologies
(``kai.scheduler/v1alpha1``). Topologies are optional: while their CRD is not installed (404) or ingest may
not list them (403), one log line says so, every other kind keeps flowing, and the list is tried again every
``absent_retry_s``. One thread per resource
lists and watches (``allowWatchBookmarks``, server-side ``timeoutSeconds``) and hands raw objects to
the single main loop, which translates them (:mod:`ingest.kube.translate`), groups pods that name no PodGroup
(:mod:`ingest.kube.podgrouper`, creating / updating the PodGroup object), and appends the events.

Exactly-once across restarts (docs/ingest.md has the full argument):

* **Dedupe state.** For every object the ingest remembers what it last emitted: a digest of the
  last ``NodeUpserted`` / ``QueueUpserted`` / ``PodGroupUpserted`` (without ``at_ms``), and for
  pods which lifecycle events were emitted (submitted, bound, releasing, finished). An object
  update that translates to what was already emitted emits nothing, so a replayed watch event, a
  relist or a status-only change never duplicates an event.
* **Write-ahead state file.** Each step computes its events, then writes the state file (resource
  versions, dedupe state, and the batch about to be appended with the topic's end offset), then
  appends the batch. After a crash, the batch in the state file is compared with the topic from
  that offset and only its missing suffix is appended. So the resourceVersions on disk always match
  the events in the log: the restart resumes each watch from its resourceVersion and neither loses
  nor duplicates an event.
* **410 Gone** (the resourceVersion was compacted) makes that resource relist; the list is diffed
  against the dedupe state, so changes are emitted once and objects that vanished meanwhile get
  their deletion event.
* **No state file** (first start, or a Kafka deployment without a volume): the dedupe state is
  rebuilt by folding the events topic from offset 0, then every resource is listed and diffed.

Invalid objects never stop the flow: they become a dead-letter record (JSON ``{source_topic,
source_offset, reason_code, message, raw}``, ``source_topic`` = ``kube:<Kind>``, ``source_offset``
= the object's resourceVersion) and a Warning Event on the object, once per distinct error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

import msgspec
import urllib3

from ingest.events import (
    CSINodeDeleted,
    CSINodeUpserted,
    EventBase,
    EventError,
    ForeignPodUpserted,
    NamespaceDeleted,
    NamespaceUpserted,
    NodeRemoved,
    NodeUpserted,
    PodBound,
    PodDeleted,
    PodFinished,
    PodGroupDeleted,
    PodGroupUpserted,
    PodReleasing,
    PodSubmitted,
    PodUngated,
    PodVolumesChanged,
    QueueDeleted,
    QueueUpserted,
    TopologyDeleted,
    TopologyUpserted,
    VolumeClaim,
    dump_event,
    event_key,
    parse_event,
)
from ingest.kube import dra
from ingest.kube import translate as kube
from ingest.kube import volumes as kube_volumes
from ingest.kube.client import KubeApi, KubeError, add_kubeconfig_argument
from ingest.kube.podgrouper import (
    ANNOTATION_SKIP_PODGROUPER,
    LABEL_SUBGROUP,
    PodGroupPlan,
    plan_pod_group,
    podgroup_manifest,
    podgroup_patch,
    resolve_owners,
    skip_podgrouper,
)
from ingest.log import DEFAULT_TOPICS, Log, Topics

__all__ = [
    "ABSENT_RETRY_S",
    "COMPONENT",
    "NAMESPACES",
    "RESOURCES",
    "TOPOLOGIES",
    "IngestStats",
    "KubeIngest",
    "Resource",
    "absent_message",
    "add_arguments",
    "default_state_path",
    "run_cli",
]

log = logging.getLogger(__name__)

COMPONENT: Final = "hourglass-ingest"
STATE_VERSION: Final = 1
CLUSTER_EVENT_NAMESPACE: Final = "default"  # Events about cluster-scoped objects (Nodes, Queues)
_API_VERSIONS: Final = {
    "Pod": "v1",
    "Node": "v1",
    "Queue": "scheduling.run.ai/v2",
    "PodGroup": "scheduling.run.ai/v2alpha2",
    "Topology": "kai.scheduler/v1alpha1",
    "Namespace": "v1",
    "CSINode": "storage.k8s.io/v1",
}
_EVENT_MESSAGE_MAX = 1024


@dataclass(frozen=True, slots=True)
class Resource:
    """One watched resource: its kind and collection path (``{ns}`` filled when namespaced).

    ``crd`` names the CustomResourceDefinition of an optional resource: one the cluster may not serve (its
    CRD is not installed) or ingest may not read, without which every other kind still flows. ``optional``
    marks a built-in resource ingest may not be allowed to read (Namespaces, for a namespace-scoped role).
    """

    kind: str
    cluster_path: str
    namespaced_path: str | None = None
    crd: str | None = None
    optional: bool = False

    @property
    def may_be_absent(self) -> bool:
        """Whether a 403 / 404 on its list leaves it out (logged, listed again) instead of failing."""
        return self.crd is not None or self.optional

    def path(self, namespace: str | None) -> str:
        if namespace and self.namespaced_path:
            return self.namespaced_path.format(ns=namespace)
        return self.cluster_path


QUEUES = Resource("Queue", "/apis/scheduling.run.ai/v2/queues")
# KAI's Topology CRD is optional: a cluster without topology-aware scheduling need not install it.
TOPOLOGIES = Resource("Topology", "/apis/kai.scheduler/v1alpha1/topologies", crd="topologies.kai.scheduler")
NODES = Resource("Node", "/api/v1/nodes")
# Namespaces' labels are what affinity terms' namespaceSelector match; without them (no permission) such a
# selector matches no namespace (an empty selector still matches every one).
NAMESPACES = Resource("Namespace", "/api/v1/namespaces", optional=True)
PODGROUPS = Resource(
    "PodGroup",
    "/apis/scheduling.run.ai/v2alpha2/podgroups",
    "/apis/scheduling.run.ai/v2alpha2/namespaces/{ns}/podgroups",
)
PODS = Resource("Pod", "/api/v1/pods", "/api/v1/namespaces/{ns}/pods")
# Pods of other schedulers, cluster-wide whatever --namespace says: they share the nodes.
FOREIGN_PODS = Resource("ForeignPod", "/api/v1/pods")
# DRA drivers publish a node's devices in ResourceSlices: optional, a cluster may not serve resource.k8s.io/v1.
RESOURCE_SLICES = Resource(
    "ResourceSlice", "/apis/resource.k8s.io/v1/resourceslices", crd="resourceslices.resource.k8s.io"
)
# A node's CSI drivers and attach limits (NodeVolumeLimits); optional: without them no limit applies.
CSINODES = Resource("CSINode", "/apis/storage.k8s.io/v1/csinodes", optional=True)
# Volumes attached to a node outside any pod count toward its limit too; they ride on its CSINode event.
VOLUME_ATTACHMENTS = Resource("VolumeAttachment", "/apis/storage.k8s.io/v1/volumeattachments", optional=True)
# What a pod's claims resolve against, kept in memory (as kube-scheduler's informers do) so that a change
# reaches the pending pods that mount them (PodVolumesChanged). Optional: without one (no permission),
# ingest reads those objects from the API server when it submits a pod, as before.
STORAGE_RESOURCES: Final = (
    Resource("StorageClass", "/apis/storage.k8s.io/v1/storageclasses", optional=True),
    Resource("CSIDriver", "/apis/storage.k8s.io/v1/csidrivers", optional=True),
    Resource("CSIStorageCapacity", "/apis/storage.k8s.io/v1/csistoragecapacities", optional=True),
    Resource("PersistentVolume", "/api/v1/persistentvolumes", optional=True),
    Resource("PersistentVolumeClaim", "/api/v1/persistentvolumeclaims", optional=True),
)
STORAGE_KINDS: Final = frozenset(r.kind for r in STORAGE_RESOURCES)
RESOURCES: Final = (
    QUEUES,
    TOPOLOGIES,
    NODES,
    NAMESPACES,
    RESOURCE_SLICES,
    CSINODES,
    *STORAGE_RESOURCES,
    VOLUME_ATTACHMENTS,
    PODGROUPS,
    PODS,
    FOREIGN_PODS,
)
"""In initial-sync order: queues before pods, so a pod's queue is known when the pod is checked."""
ABSENT_RETRY_S: Final = 30.0
GROUPING_WORKERS: Final = 8
"""PodGroups created side by side for the new pods of one batch: grouping a burst of bare pods costs one
API round trip per PodGroup, which a single thread pays one after the other."""
"""How often an optional resource that is not served (or not readable) is listed again."""


def absent_message(res: Resource, status: int, retry_s: float) -> str:
    """The log line for optional resource ``res`` whose list answered ``status`` (404 or 403)."""
    if res.crd is None and res.kind != "Namespace":
        plural = res.cluster_path.rsplit("/", 1)[1]
        return (
            f"{res.kind}: ingest may not list {plural} ({status}): grant it get, list and watch on them, as the"
            f" Helm chart's ingest ClusterRole does. Until then"
            + (
                " no node's CSI attach limit is known (none applies)"
                if res.kind == "CSINode"
                else f" {plural} are read when a pod is submitted and their changes do not reach pending pods"
            )
            + f"; every other kind keeps flowing. Listing again every {retry_s:g}s"
        )
    if res.crd is None:  # a built-in resource: only a missing permission keeps it out
        plural = res.cluster_path.rsplit("/", 1)[1]
        return (
            f"{res.kind}: ingest may not list {plural} ({status}): grant it get, list and watch on them, as the"
            f" Helm chart's ingest ClusterRole does. Until then an affinity term's namespaceSelector matches"
            f" no namespace but its own list (an empty selector: every namespace); every other kind keeps"
            f" flowing. Listing again every {retry_s:g}s"
        )
    _, _, group, version, plural = res.cluster_path.split("/")
    what = (
        f"the API server does not serve {group}/{version} {plural}: is the CRD {res.crd} installed? (it is in"
        " deploy/crds and in the Helm chart)"
        if status == 404 and group != "resource.k8s.io"
        else f"the API server does not serve {group}/{version} {plural} (Dynamic Resource Allocation, GA in"
        " Kubernetes 1.34)"
        if status == 404
        else f"ingest may not list {plural} of API group {group} (403 Forbidden): grant it get, list and watch"
        " on them, as the Helm chart's ingest ClusterRole does"
    )
    effect = (
        " (a PodGroup whose topology constraint names one waits: its topology 'does not exist')"
        if res.kind == "Topology"
        else ""
    )
    return (
        f"{res.kind}: {what}. {res.kind} objects are not watched until then{effect}; every other kind keeps"
        f" flowing. Listing again every {retry_s:g}s"
    )


def default_state_path(log_spec: str) -> Path | None:
    """``<dir>/ingest-state.json`` for a FileLog directory; None for Kafka (pass a path explicitly)."""
    return None if log_spec.startswith("kafka://") else Path(log_spec) / "ingest-state.json"


# --------------------------------------------------------------------------- the API, raw JSON


def _with_label(obj: dict[str, Any], key: str, value: str) -> dict[str, Any]:
    """A copy of ``obj`` with one more label (the pod-grouper's subgroup, as KAI labels the pod)."""
    meta = dict(obj.get("metadata") or {})
    meta["labels"] = {**(meta.get("labels") or {}), key: value}
    return {**obj, "metadata": meta}


# --------------------------------------------------------------------------- inbox items


@dataclass(frozen=True, slots=True)
class _Listed:
    kind: str
    items: list[dict[str, Any]]
    rv: str
    absent: int = 0  # an optional resource that answered 404 (not served) or 403 (not readable); else 0


@dataclass(frozen=True, slots=True)
class _Changed:
    kind: str
    type: str  # ADDED | MODIFIED | DELETED
    obj: dict[str, Any]
    rv: str


@dataclass(frozen=True, slots=True)
class _Bookmark:
    kind: str
    rv: str


_Item = _Listed | _Changed | _Bookmark


@dataclass(slots=True)
class IngestStats:
    """Counters since the ingest started."""

    events: int = 0
    dead_letters: int = 0
    warnings_posted: int = 0
    lists: int = 0
    relists_410: int = 0
    watch_errors: int = 0
    bookmarks: int = 0
    absent_lists: int = 0  # lists of an optional resource answered 404 / 403
    podgroups_created: int = 0
    podgroups_updated: int = 0
    recovered_events: int = 0  # appended from the write-ahead batch on start
    rebuilt_from_log: int = 0  # events folded to rebuild the dedupe state (no state file)


@dataclass(slots=True)
class _Batch:
    events: list[EventBase] = field(default_factory=list)
    dead: list[tuple[bytes, bytes]] = field(default_factory=list)
    # Warning Events to post after the append: (kind, object, reason, message).
    notices: list[tuple[str, dict[str, Any], str, str]] = field(default_factory=list)


def _digest(text: bytes | str) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()[:32]


def _event_digest(ev: EventBase) -> str:
    return _digest(dump_event(ev.model_copy(update={"at_ms": 0})))


def _strip(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without ``managedFields`` (noise in dead letters)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class KubeIngest:
    """The ingest loop. ``start()`` recovers and syncs, ``step()`` / ``run()`` process watch events.

    ``api`` is a :class:`KubeApi`; ``log`` is any :class:`~ingest.log.Log` (the caller owns it).
    ``state_path`` None keeps the dedupe state in memory only (it is rebuilt from the log on start).
    ``clock`` gives ``at_ms`` (wall-clock milliseconds, made monotonic here).
    """

    def __init__(
        self,
        api: KubeApi,
        log: Log,
        topics: Topics = DEFAULT_TOPICS,
        *,
        state_path: Path | None = None,
        scheduler_name: str = "hourglass",
        namespace: str | None = None,
        group_pods: bool = True,
        watch_timeout_s: int = 60,
        checkpoint_interval_s: float = 5.0,
        clock: Callable[[], int] = _now_ms,
        absent_retry_s: float = ABSENT_RETRY_S,
        grouping_workers: int = GROUPING_WORKERS,
    ) -> None:
        self.api = api
        self.log = log
        self.topics = topics
        self.state_path = state_path
        self.scheduler_name = scheduler_name
        self.namespace = namespace
        self.group_pods = group_pods
        self.watch_timeout_s = watch_timeout_s
        self.checkpoint_interval_s = checkpoint_interval_s
        self.clock = clock
        self.absent_retry_s = absent_retry_s
        self.grouping_workers = grouping_workers
        self.stats = IngestStats()
        self.rvs: dict[str, str] = {}
        self.objects: dict[str, str] = {}  # "Kind/key" -> digest of the last upsert event emitted
        self.pods: dict[str, dict[str, Any]] = {}  # "ns/name" -> {uid, group, node, releasing, finished}
        self.rejected: dict[str, str] = {}  # "Kind/key" -> digest of the error already reported
        self.warned: dict[str, str] = {}  # "Kind/key" -> digest of the warnings already posted
        # "Kind/key" -> resourceVersion of the newest version seen in this process. A relist taken
        # before we created an object (our own PodGroups) must not read its absence as a deletion.
        self.seen_rvs: dict[str, str] = {}
        self.last_at_ms = 0
        self._planned: dict[tuple[str, str], PodGroupPlan] = {}
        # Made ahead by _prefetch_groups for this batch: (namespace, name) -> (plan, the API's answer), and
        # pod key -> its owner chain as read then. _group takes each once; _process clears what is left.
        self._made: dict[tuple[str, str], tuple[PodGroupPlan, Future[tuple[dict[str, Any], str]]]] = {}
        self._owners: dict[str, list[dict[str, Any]]] = {}
        self._grouper: ThreadPoolExecutor | None = None
        self._priorities: dict[str, int | None] = {}
        self._retry: dict[str, tuple[float, _Changed]] = {}
        self._inbox: queue.Queue[_Item] = queue.Queue()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._responses: dict[str, Any] = {}
        self._dirty_since: float | None = None
        self._failed = False  # an append failed: keep the write-ahead state file as it is
        self._owner_get = api.owner_getter()
        self._absent: dict[str, int] = {}  # optional kind -> the status its last list answered (404 / 403)
        self._nodes: dict[str, dict[str, Any]] = {}  # Node name -> its last object (DRA devices join it)
        self._slices: dict[str, tuple[str, str, str, int, list[dra.SliceDevice]]] = {}  # GPU ResourceSlices
        # Storage objects by kind and key, for the kinds listed (and watched) successfully.
        self._storage: dict[str, dict[str, dict[str, Any]]] = {}
        # Pods whose claims follow storage changes: ours while pending, other schedulers' while bound.
        self._claimants: dict[str, dict[str, Any]] = {}
        self._foreign_claimants: dict[str, dict[str, Any]] = {}
        self._vol_digest: dict[str, str] = {}  # pod key -> digest of the volumes last emitted for it
        self._csinodes: dict[str, dict[str, Any]] = {}  # CSINode name -> its last object
        self._vas: dict[str, dict[str, Any]] = {}  # VolumeAttachment name -> its last object

    # ------------------------------------------------------------------ lifecycle

    def start(self, *, watch: bool = True, relist: bool = False) -> None:
        """Recover (state file or log), finish an interrupted append, sync, then start the watches.

        Resources without a stored resourceVersion (all of them with ``relist``) are listed and
        diffed here, in :data:`RESOURCES` order; the others resume their watch from the stored
        version (410 -> relist in the thread).
        """
        loaded = self._load_state()
        if not loaded:
            self._rebuild_from_log()
        for res in RESOURCES:
            # Storage objects live only in memory: listed on every start, whatever version was stored.
            if relist or res.kind not in self.rvs or res.kind in STORAGE_KINDS:
                self._process([self._list(res)])
        self._save_state(None)
        if watch:
            for res in RESOURCES:
                t = threading.Thread(
                    target=self._watch_loop, args=(res,), name=f"watch-{res.kind}", daemon=True
                )
                t.start()
                self._threads.append(t)

    def stop(self) -> None:
        """Stop the watch threads and write the state file."""
        self._stopping.set()
        for resp in list(self._responses.values()):
            # Best effort: unblocks a thread waiting for the next watch line (it also ends at its timeout).
            with contextlib.suppress(Exception):
                resp.shutdown()
        for t in self._threads:
            t.join(timeout=5)
        self._threads.clear()
        if self._grouper is not None:
            self._grouper.shutdown(wait=True)
            self._grouper = None
        self._save_state(None)

    def step(self, timeout_s: float = 0.5, max_items: int = 1000) -> int:
        """Process what the watches delivered (waiting up to ``timeout_s`` for the first item).

        Returns the number of events appended.
        """
        items: list[_Item] = []
        try:
            items.append(self._inbox.get(timeout=timeout_s))
            while len(items) < max_items:
                items.append(self._inbox.get_nowait())
        except queue.Empty:
            pass
        now = time.monotonic()
        due = [c for _, (at, c) in sorted(self._retry.items()) if at <= now]
        for c in due:
            self._retry.pop(kube.object_key(c.obj), None)
        return self._process([*due, *items])

    def run(self, stop: threading.Event | None = None, max_seconds: float | None = None) -> None:
        """Loop :meth:`step` until ``stop`` is set or ``max_seconds`` passed."""
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        while not (stop is not None and stop.is_set()) and not (deadline and time.monotonic() >= deadline):
            self.step(0.5)

    # ------------------------------------------------------------------ watch threads

    def _ns(self, res: Resource) -> str | None:
        return self.namespace if res.namespaced_path else None

    def _selector(self, res: Resource) -> str | None:
        if res is FOREIGN_PODS:
            # Bound, not finished, not ours. A pod leaving this set (finished) arrives as DELETED.
            return (
                f"spec.schedulerName!={self.scheduler_name},spec.nodeName!=,"
                "status.phase!=Succeeded,status.phase!=Failed"
            )
        return f"spec.schedulerName={self.scheduler_name}" if res is PODS else None

    def _list(self, res: Resource) -> _Listed:
        """LIST ``res``. An optional resource that is not served (404) or not readable (403) lists as
        absent, logged once until it comes back; any other error raises."""
        try:
            items, rv = self.api.list_all(res, self._ns(res), self._selector(res))
        except KubeError as exc:
            if not res.may_be_absent or exc.status not in (403, 404):
                raise
            self.stats.absent_lists += 1
            if self._absent.get(res.kind) != exc.status:
                log.warning(absent_message(res, exc.status, self.absent_retry_s))
            self._absent[res.kind] = exc.status
            return _Listed(res.kind, [], "", absent=exc.status)
        self.stats.lists += 1
        if self._absent.pop(res.kind, None) is not None:
            log.info(
                "%s: %s is served and readable now: watching them", res.kind, res.crd or res.cluster_path
            )
        return _Listed(res.kind, items, rv)

    def _watch_loop(self, res: Resource) -> None:
        rv: str | None = self.rvs.get(res.kind)
        backoff = 0.5
        while not self._stopping.is_set():
            try:
                if rv is None:
                    listed = self._list(res)
                    self._inbox.put(listed)
                    if listed.absent:
                        self._stopping.wait(self.absent_retry_s)
                        continue
                    rv = listed.rv
                gone = False
                for ev in self.api.watch(
                    res,
                    self._ns(res),
                    self._selector(res),
                    rv,
                    self.watch_timeout_s,
                    lambda r: self._responses.__setitem__(res.kind, r),
                ):
                    if self._stopping.is_set():
                        return
                    typ, obj = ev.get("type"), ev.get("object") or {}
                    if typ == "ERROR":
                        if obj.get("code") == 410:
                            gone = True
                            break
                        raise RuntimeError(f"watch error: {obj.get('reason')}: {obj.get('message')}")
                    new_rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if typ == "BOOKMARK":
                        self._inbox.put(_Bookmark(res.kind, new_rv))
                    elif typ in ("ADDED", "MODIFIED", "DELETED"):
                        self._inbox.put(_Changed(res.kind, str(typ), obj, new_rv))
                    rv = new_rv
                if gone:
                    log.info("watch %s: resourceVersion %s is gone (410), relisting", res.kind, rv)
                    self.stats.relists_410 += 1
                    rv = None
                backoff = 0.5
            except KubeError as exc:
                if exc.status == 410:
                    log.info("watch %s: 410 Gone, relisting", res.kind)
                    self.stats.relists_410 += 1
                    rv = None
                    continue
                if res.may_be_absent and exc.status in (403, 404):
                    rv = None  # the CRD went away (or the permission): the list says so and waits
                    continue
                self._watch_failed(res, exc, backoff)
                backoff = min(backoff * 2, 30.0)
            except Exception as exc:  # connection reset, timeouts, ...: retry from the same version
                if self._stopping.is_set():
                    return
                self._watch_failed(res, exc, backoff)
                backoff = min(backoff * 2, 30.0)

    def _watch_failed(self, res: Resource, exc: BaseException, backoff: float) -> None:
        self.stats.watch_errors += 1
        log.warning("watch %s failed (%s: %s); retrying in %.1fs", res.kind, type(exc).__name__, exc, backoff)
        self._stopping.wait(backoff)

    # ------------------------------------------------------------------ processing

    def _at(self) -> int:
        self.last_at_ms = max(self.last_at_ms, self.clock())
        return self.last_at_ms

    def _process(self, items: list[_Item]) -> int:
        if not items:
            self._maybe_checkpoint()
            return 0
        batch = _Batch()
        self._prefetch_groups(items)
        try:
            self._apply_items(items, batch)
        finally:
            # A PodGroup made ahead for a pod that did not get to _group (an error, a later version in the
            # batch) is finished before the next batch, which may ask for it again (409: read and kept).
            for _, made in self._made.values():
                made.exception()
            self._made.clear()
            self._owners.clear()
        self._dirty_since = self._dirty_since or time.monotonic()
        if batch.events or batch.dead:
            self._commit(batch)
        else:
            self._maybe_checkpoint()
        self._post_notices(batch)
        return len(batch.events)

    def _apply_items(self, items: list[_Item], batch: _Batch) -> None:
        for item in items:
            if isinstance(item, _Bookmark):
                self.rvs[item.kind] = item.rv
                self.stats.bookmarks += 1
            elif isinstance(item, _Listed) and item.kind in STORAGE_KINDS:
                self._storage_listed(item, batch)
                if item.absent:
                    self.rvs.pop(item.kind, None)
                else:
                    self.rvs[item.kind] = item.rv
            elif isinstance(item, _Listed) and item.absent:
                # Not served: its objects are gone with the CRD. Not readable: nothing is known, keep them.
                if item.absent == 404:
                    self._diff_list(item, batch)
                self.rvs.pop(item.kind, None)  # the next start lists it again
            elif isinstance(item, _Listed):
                self._diff_list(item, batch)
                self.rvs[item.kind] = item.rv
            else:
                self._changed(item, batch)
                if item.rv:
                    self.rvs[item.kind] = item.rv

    def _prefetch_groups(self, items: list[_Item]) -> None:
        """Start creating, side by side, the PodGroups that the new pods among ``items`` will need.

        Only the API calls move ahead: :meth:`_group` still runs for each pod in the batch's order and
        takes the answer from here, so the events, their order and every error path are those of one call
        at a time. A pod this cannot plan (a pod-group annotation, ResourceClaims, an invalid shape, an
        owner that refuses grouping) is left wholly to :meth:`_group`.
        """
        if not self.group_pods or self.grouping_workers < 2:
            return
        pods = [
            obj
            for item in items
            if item.kind == "Pod"
            for obj in (
                [item.obj]
                if isinstance(item, _Changed) and item.type != "DELETED"
                else item.items
                if isinstance(item, _Listed)
                else []
            )
        ]
        plans: dict[tuple[str, str], PodGroupPlan] = {}
        for obj in pods:
            plan = self._plan_new_pod(obj)
            if plan is not None and self._planned.get((plan.namespace, plan.name)) != plan:
                plans.setdefault((plan.namespace, plan.name), plan)
        if len(plans) < 2:
            return  # nothing to overlap: _group makes it as it always did
        if self._grouper is None:
            self._grouper = ThreadPoolExecutor(self.grouping_workers, thread_name_prefix="podgroups")
        for k, plan in plans.items():
            self._made[k] = (plan, self._grouper.submit(self._put_group, plan))

    def _plan_new_pod(self, obj: dict[str, Any]) -> PodGroupPlan | None:
        """The PodGroup a pod not yet submitted would get from :meth:`_group`, or None when it needs none,
        is not new, or is one :meth:`_group` should judge on its own."""
        meta = obj.get("metadata") or {}
        key = kube.object_key(obj)
        st = self.pods.get(key)
        if st is not None and not (st.get("uid") and meta.get("uid") and st["uid"] != meta.get("uid")):
            return None
        if kube.pod_group_annotation(obj) is not None or dra.pod_claim_refs(obj):
            return None
        try:
            kube.pod_submitted(obj, "unassigned", 0, dra={})
            owners = resolve_owners(obj, self._owner_get)
            self._owners[key] = owners
            if skip_podgrouper(obj, owners) is not None:
                return None
            plan = plan_pod_group(obj, owners, self._owner_get)
        except Exception:  # any refusal is reported by _group, where the pod is handled
            return None
        return dataclasses.replace(plan, pod_subgroup=None)

    def _put_group(self, plan: PodGroupPlan) -> tuple[dict[str, Any], str]:
        """Create the PodGroup of ``plan``, or bring an existing one in line with it (409); returns the
        object and what was done (``created``, ``updated`` or ``kept``). Safe on a worker thread."""
        base = f"/apis/scheduling.run.ai/v2alpha2/namespaces/{plan.namespace}/podgroups"
        try:
            return self.api.request("POST", base, body=podgroup_manifest(plan)), "created"
        except KubeError as exc:
            if exc.status != 409:
                raise
        obj = self.api.request("GET", f"{base}/{plan.name}")
        patch = podgroup_patch(obj, plan)
        if patch is None:
            return obj, "kept"
        obj = self.api.request(
            "PATCH", f"{base}/{plan.name}", body=patch, content_type="application/merge-patch+json"
        )
        return obj, "updated"

    def _commit(self, batch: _Batch) -> None:
        """Write-ahead: state file with the batch, then the appends."""
        events = [(event_key(e).encode(), dump_event(e)) for e in batch.events]
        pending = {
            self.topics.events: {"start": self.log.end_offset(self.topics.events), "records": events},
            self.topics.deadletter: {
                "start": self.log.end_offset(self.topics.deadletter),
                "records": batch.dead,
            },
        }
        self._save_state(pending)
        try:
            if events:
                self.log.append_many(self.topics.events, events)
            if batch.dead:
                self.log.append_many(self.topics.deadletter, batch.dead)
        except BaseException:
            # The state file now holds this batch as pending; it must stay so for the next start.
            self._failed = True
            raise
        self.stats.events += len(events)
        self.stats.dead_letters += len(batch.dead)

    def _emit(self, batch: _Batch, ev: EventBase) -> None:
        self._remember(ev)
        batch.events.append(ev)

    def _remember(self, ev: EventBase) -> None:
        """Update the dedupe state for an event emitted now, or read back from the log."""
        self.last_at_ms = max(self.last_at_ms, ev.at_ms)
        if isinstance(ev, NodeUpserted):
            self.objects[f"Node/{ev.name}"] = _event_digest(ev)
        elif isinstance(ev, QueueUpserted):
            self.objects[f"Queue/{ev.name}"] = _event_digest(ev)
        elif isinstance(ev, PodGroupUpserted):
            self.objects[f"PodGroup/{ev.namespace}/{ev.name}"] = _event_digest(ev)
        elif isinstance(ev, TopologyUpserted):
            self.objects[f"Topology/{ev.name}"] = _event_digest(ev)
        elif isinstance(ev, TopologyDeleted):
            self.objects.pop(f"Topology/{ev.name}", None)
        elif isinstance(ev, NamespaceUpserted):
            self.objects[f"Namespace/{ev.name}"] = _event_digest(ev)
        elif isinstance(ev, NamespaceDeleted):
            self.objects.pop(f"Namespace/{ev.name}", None)
        elif isinstance(ev, CSINodeUpserted):
            self.objects[f"CSINode/{ev.name}"] = _event_digest(ev)
        elif isinstance(ev, CSINodeDeleted):
            self.objects.pop(f"CSINode/{ev.name}", None)
        elif isinstance(ev, NodeRemoved):
            self.objects.pop(f"Node/{ev.name}", None)
        elif isinstance(ev, QueueDeleted):
            self.objects.pop(f"Queue/{ev.name}", None)
        elif isinstance(ev, PodGroupDeleted):
            self.objects.pop(f"PodGroup/{ev.namespace}/{ev.name}", None)
        elif isinstance(ev, ForeignPodUpserted):
            self.objects[f"ForeignPod/{ev.namespace}/{ev.name}"] = _event_digest(ev)
        elif isinstance(ev, PodUngated):
            st0 = self.pods.get(f"{ev.namespace}/{ev.name}")
            if st0 is not None:
                st0["gated"] = False
        elif isinstance(ev, PodSubmitted):
            self.pods[f"{ev.namespace}/{ev.name}"] = {
                "uid": None,
                "group": ev.pod_group,
                "node": None,
                "releasing": False,
                "finished": None,
                "gated": bool(ev.scheduling_gates),
            }
        elif isinstance(ev, PodBound | PodReleasing | PodFinished | PodDeleted):
            key = f"{ev.namespace}/{ev.name}"
            if isinstance(ev, PodFinished | PodDeleted):
                self.objects.pop(f"ForeignPod/{key}", None)
            st = self.pods.get(key)
            if isinstance(ev, PodDeleted):
                self.pods.pop(key, None)
            elif st is None:
                return
            elif isinstance(ev, PodBound):
                st["node"] = ev.node
            elif isinstance(ev, PodReleasing):
                st["releasing"] = True
            else:
                st["finished"] = ev.phase

    def _reject(self, batch: _Batch, kind: str, obj: dict[str, Any], err: kube.InvalidObject) -> None:
        """Dead-letter an invalid object and post a Warning on it, once per distinct error."""
        key = f"{kind}/{kube.object_key(obj)}"
        digest = _digest(err.message)
        if self.rejected.get(key) == digest:
            return
        self.rejected[key] = digest
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        record = {
            "source_topic": f"kube:{kind}",
            "source_offset": int(rv) if rv.isdigit() else -1,
            "reason_code": err.reason_code,
            "message": err.message,
            "raw": json.dumps(_strip(obj), sort_keys=True, separators=(",", ":")),
        }
        body = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        batch.dead.append((f"kube:{kind}:{kube.object_key(obj)}".encode(), body))
        batch.notices.append((kind, obj, err.reason, err.message))
        log.warning("rejected %s: %s", key, err.message)

    def _warn(self, batch: _Batch, kind: str, obj: dict[str, Any], reason: str, messages: list[str]) -> None:
        """Post Warning Events for problems that do not stop the object (once per distinct set)."""
        key = f"{kind}/{kube.object_key(obj)}:{reason}"
        digest = _digest("\n".join(messages))
        if not messages:
            self.warned.pop(key, None)
            return
        if self.warned.get(key) == digest:
            return
        self.warned[key] = digest
        for m in messages:
            batch.notices.append((kind, obj, reason, f"{kind} {kube.object_key(obj)}: {m}"))

    def _diff_list(self, item: _Listed, batch: _Batch) -> None:
        """A full list of one kind: upsert what changed, delete what is no longer there."""
        seen: set[str] = set()
        for obj in item.items:
            seen.add(kube.object_key(obj))
            self._changed(_Changed(item.kind, "ADDED", obj, ""), batch)
        if item.kind == "Pod":
            for key in sorted(set(self.pods) - seen):
                if self.namespace is None or key.startswith(f"{self.namespace}/"):
                    ns, _, name = key.partition("/")
                    self._emit(batch, kube.pod_deleted(ns, name, self._at()))
                    self._retry.pop(key, None)
            return
        if item.kind == "ResourceSlice":
            for key in sorted(set(self._slices) - seen):
                self._slice(batch, key, None)
            return
        if item.kind == "VolumeAttachment":
            for key in sorted(set(self._vas) - seen):
                self._attachment(batch, key, None)
            return
        prefix = f"{item.kind}/"
        for okey in sorted(k for k in self.objects if k.startswith(prefix)):
            key = okey[len(prefix) :]
            if key in seen or (
                item.kind == "PodGroup" and self.namespace and not key.startswith(f"{self.namespace}/")
            ):
                continue
            seen_rv = self.seen_rvs.get(okey, "")
            if seen_rv.isdigit() and item.rv.isdigit() and int(seen_rv) > int(item.rv):
                continue  # newer than the list: created after its snapshot, not deleted
            ns, _, name = key.rpartition("/")
            stub = {"metadata": {"name": name, **({"namespace": ns} if ns else {})}}
            self._deleted(item.kind, stub, batch)

    def _deleted(self, kind: str, obj: dict[str, Any], batch: _Batch) -> None:
        key = kube.object_key(obj)
        self.rejected.pop(f"{kind}/{key}", None)
        self.seen_rvs.pop(f"{kind}/{key}", None)
        for wkey in [w for w in self.warned if w.startswith(f"{kind}/{key}:")]:
            del self.warned[wkey]
        if kind == "PodGroup":
            ns, _, name = key.partition("/")
            self._planned.pop((ns, name), None)
        if kind == "Pod":
            self._retry.pop(key, None)
            self._claimants.pop(key, None)
            self._vol_digest.pop(key, None)
            st = self.pods.get(key)
            uid = (obj.get("metadata") or {}).get("uid")
            if st is not None and not (st.get("uid") and uid and st["uid"] != uid):
                ns, _, name = key.partition("/")
                self._emit(batch, kube.pod_deleted(ns, name, self._at()))
            return
        if kind == "ResourceSlice":
            self._slice(batch, key, None)
            return
        if kind in STORAGE_KINDS:
            if self._storage.get(kind, {}).pop(key, None) is not None:
                self._storage_moved(batch)
            return
        if kind == "VolumeAttachment":
            self._attachment(batch, key, None)
            return
        if kind == "CSINode":
            self._csinodes.pop(key, None)
        if kind == "ForeignPod":
            self._foreign_claimants.pop(key, None)
        if f"{kind}/{key}" not in self.objects:
            return
        if kind == "ForeignPod":
            ns, _, name = key.partition("/")
            self._emit(batch, kube.pod_deleted(ns, name, self._at()))
        elif kind == "Node":
            self._nodes.pop(key, None)
            self._emit(batch, kube.node_removed(obj, self._at()))
        elif kind == "Queue":
            self._emit(batch, kube.queue_deleted(obj, self._at()))
        elif kind == "PodGroup":
            self._emit(batch, kube.podgroup_deleted(obj, self._at()))
        elif kind == "Topology":
            self._emit(batch, kube.topology_deleted(obj, self._at()))
        elif kind == "Namespace":
            self._emit(batch, kube.namespace_deleted(obj, self._at()))
        elif kind == "CSINode":
            self._emit(batch, kube.csi_node_deleted(obj, self._at()))

    def _node(self, batch: _Batch, name: str) -> None:
        """Upsert a node; its DRA GPUs (from its ResourceSlices) join its allocatable as the extended
        resource ``dra.hourglass.dev/<driver>`` (:mod:`ingest.kube.dra`). A node without any is as before."""
        obj = self._nodes.get(name)
        if obj is None:
            return
        ev = kube.node_upserted(obj, self._at())
        devices = dra.node_devices(s for s in self._slices.values() if s[0] == name)
        if devices:
            extended = dict(ev.extended)
            for d in devices:
                res = dra.dra_resource(d.driver)
                extended[res] = extended.get(res, 0) + 1
            # Validated again, not copied: the contract version follows from the fields (extended is v2).
            fields = {**ev.model_dump(exclude={"v"}), "extended": dict(sorted(extended.items()))}
            ev = NodeUpserted.model_validate(fields)
        self._upsert(batch, ev, f"Node/{name}")

    def _slice(self, batch: _Batch, key: str, obj: dict[str, Any] | None) -> None:
        """A ResourceSlice changed (None: deleted): re-upsert its node when its GPUs changed."""
        old = self._slices.pop(key, None)
        new = dra.slice_devices(obj) if obj is not None else None
        if new is not None:
            self._slices[key] = new
        for node in sorted({s[0] for s in (old, new) if s is not None}):
            self._node(batch, node)

    def _foreign(self, obj: dict[str, Any]) -> ForeignPodUpserted:
        """A pod of another scheduler; the DRA GPUs its allocated claims hold on its node count as its
        request, so the engine does not offer them to our pods; its claims count for ReadWriteOncePod and
        the node's CSI attach limits."""
        pvcs = kube.pod_claims(obj)
        if pvcs:
            self._foreign_claimants[kube.object_key(obj)] = obj
        ev = kube.foreign_pod(obj, self._at(), self._volumes(obj, pvcs) if pvcs else None)
        refs = dra.pod_claim_refs(obj)
        if not refs:
            return ev
        ns = str((obj.get("metadata") or {}).get("namespace") or "")
        devices = set(dra.node_devices(s for s in self._slices.values() if s[0] == ev.node))
        claims = [
            self.api.get(f"{dra.API}/namespaces/{ns}/resourceclaims/{claim}") for _, claim, _ in refs if claim
        ]
        held = dra.allocated_devices(c for c in claims if c is not None) & devices
        if not held:
            return ev
        extended = dict(ev.requests.extended)
        for d in sorted(held):
            extended[dra.dra_resource(d.driver)] = extended.get(dra.dra_resource(d.driver), 0) + 1
        fields = ev.model_dump(exclude={"v"})
        fields["requests"]["extended"] = dict(sorted(extended.items()))
        return ForeignPodUpserted.model_validate(fields)

    def _dra(self, obj: dict[str, Any]) -> dict[str, int] | None:
        """The extended resources a pod's ResourceClaims translate to ({} without claims), or None when a
        template's claim is not generated yet (the caller retries). Raises InvalidObject for a refused shape."""
        refs = dra.pod_claim_refs(obj)
        if not refs:
            return {}
        key = kube.object_key(obj)
        ns = str((obj.get("metadata") or {}).get("namespace") or "")
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        out: dict[str, int] = {}
        classes: dict[str, dict[str, Any]] = {}
        for _, claim_name, where in refs:
            if claim_name is None:
                return None
            claim = self.api.get(f"{dra.API}/namespaces/{ns}/resourceclaims/{claim_name}")
            if claim is None:
                return None  # named but not created yet (or by the resourceclaim controller): look again
            for req in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
                cls = str(((req or {}).get("exactly") or {}).get("deviceClassName") or "")
                if cls and cls not in classes:
                    got = self.api.get(f"{dra.API}/deviceclasses/{cls}")
                    if got is not None:
                        classes[cls] = got
            for res, n in dra.claim_request(key, where, claim, classes, uid).items():
                out[res] = out.get(res, 0) + n
        return out

    def _podgroup_event(self, obj: dict[str, Any]) -> PodGroupUpserted:
        """PodGroupUpserted with the priority value of its PriorityClass, read from the cluster."""
        ev = kube.podgroup_upserted(obj, self._at())
        if ev.priority_class is None:
            return ev
        value = self._priority_value(ev.priority_class)
        return ev if value is None else ev.model_copy(update={"priority": value})

    def _priority_value(self, name: str) -> int | None:
        """The ``value`` of PriorityClass ``name`` (immutable in Kubernetes, so cached); None when it
        cannot be read, and the fold falls back to KAI's classes, then 50."""
        if name not in self._priorities:
            try:
                got = self.api.get(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
            except Exception as exc:  # transient: do not cache, the next update tries again
                log.warning("cannot read PriorityClass %s: %s", name, exc)
                return None
            value = got.get("value") if got else None
            self._priorities[name] = value if isinstance(value, int) and not isinstance(value, bool) else None
        return self._priorities[name]

    def _upsert(self, batch: _Batch, ev: EventBase, key: str) -> None:
        if self.objects.get(key) != _event_digest(ev):
            self._emit(batch, ev)

    def _changed(self, item: _Changed, batch: _Batch) -> None:
        obj, kind = item.obj, item.kind
        if item.type == "DELETED":
            self._deleted(kind, obj, batch)
            return
        key = kube.object_key(obj)
        if kind != "Pod" and kind not in STORAGE_KINDS:
            self.seen_rvs[f"{kind}/{key}"] = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        try:
            if kind == "Node":
                self._nodes[key] = obj
                self._node(batch, key)
            elif kind == "ResourceSlice":
                self._slice(batch, key, obj)
            elif kind == "Queue":
                ev, warnings = kube.queue_upserted(obj, self._at())
                self._upsert(batch, ev, f"Queue/{key}")
                self._warn(batch, kind, obj, "HourglassQueueCappedAtZero", warnings)
                self._warn(batch, kind, obj, "HourglassUnknownField", kube.unknown_fields(kind, obj))
            elif kind == "PodGroup":
                self._upsert(batch, self._podgroup_event(obj), f"PodGroup/{key}")
                self._warn(batch, kind, obj, "HourglassUnknownField", kube.unknown_fields(kind, obj))
            elif kind == "Topology":
                self._upsert(batch, kube.topology_upserted(obj, self._at()), f"Topology/{key}")
            elif kind == "Namespace":
                self._upsert(batch, kube.namespace_upserted(obj, self._at()), f"Namespace/{key}")
            elif kind == "CSINode":
                self._csinodes[key] = obj
                self._csi_node(batch, key)
            elif kind == "VolumeAttachment":
                self._attachment(batch, key, obj)
            elif kind in STORAGE_KINDS:
                if kind in self._storage:
                    self._storage[kind][key] = obj
                    self._storage_moved(batch)
            elif kind == "Pod":
                self._pod(item, batch)
            elif kind == "ForeignPod":
                labels = (obj.get("metadata") or {}).get("labels") or {}
                if kube.LABEL_GPU_RESERVATION in labels:
                    return  # a GPU reservation pod: its device is held for our sharers, already counted
                self._upsert(batch, self._foreign(obj), f"ForeignPod/{key}")
            self.rejected.pop(f"{kind}/{key}", None)
        except kube.InvalidObject as err:
            self._reject(batch, kind, obj, err)
        except Exception as exc:  # a shape nobody anticipated: report it, never stop the flow
            log.exception("cannot translate %s %s", kind, key)
            odd = kube.InvalidObject(
                kind, key, "", None, f"cannot be translated: {type(exc).__name__}: {exc}"
            )
            odd.reason_code = "untranslatable"
            self._reject(batch, kind, obj, odd)

    def _pod(self, item: _Changed, batch: _Batch) -> None:
        obj = item.obj
        meta = obj.get("metadata") or {}
        key = kube.object_key(obj)
        uid = meta.get("uid")
        st = self.pods.get(key)
        if st is not None and st.get("uid") and uid and st["uid"] != uid:
            # Same name, new pod (deleted and recreated while we did not look): retire the old one.
            ns, _, name = key.partition("/")
            self._emit(batch, kube.pod_deleted(ns, name, self._at()))
            st = None
        # Known pending before this update: a bind seen now was made while we watched (see _gpu_devices).
        known_pending = st is not None and not st.get("node")
        if st is None:
            group = kube.pod_group_annotation(obj)
            claimed = self._dra(obj)
            if claimed is None:
                self._retry_later(item, RuntimeError("its ResourceClaim is not created yet"))
                return
            # Validate the pod before creating anything for it: an invalid pod gets no PodGroup.
            kube.pod_submitted(obj, group or "unassigned", 0, dra=claimed)
            if group is None:
                if not self.group_pods:
                    raise kube.InvalidObject(
                        "Pod",
                        key,
                        f"metadata.annotations[{kube.ANNOTATION_POD_GROUP}]",
                        None,
                        "is required when pod grouping is off (--no-pod-grouping)",
                    )
                try:
                    group, subgroup = self._group(obj, batch)
                    if subgroup is not None:
                        obj = _with_label(obj, LABEL_SUBGROUP, subgroup)
                except KubeError as exc:
                    if exc.status is not None and 400 <= exc.status < 500 and exc.status != 429:
                        raise kube.InvalidObject(
                            "Pod", key, "", None, f"cannot create its PodGroup: {exc.status} {exc.message}"
                        ) from None
                    self._retry_later(item, exc)
                    return
                except (OSError, urllib3.exceptions.HTTPError) as exc:  # connection trouble: transient
                    self._retry_later(item, exc)
                    return
            claims = kube.pod_claims(obj)
            volumes = self._volumes(obj, claims) if claims else []
            if any(self._wait_for_claim(v) for v in volumes):
                # Its claim is about to be bound by the volume controller: look again shortly.
                self._retry_later(item, RuntimeError("an Immediate PersistentVolumeClaim is not bound yet"))
                return
            ev = kube.pod_submitted(obj, group, self._at(), volumes, dra=claimed)
            self._emit(batch, ev)
            if volumes:
                self._claimants[key] = obj
                self._vol_digest[key] = _volumes_digest(volumes)
            st = self.pods[key]
            if ev.queue is not None and f"Queue/{ev.queue}" not in self.objects:
                self._warn(
                    batch,
                    "Pod",
                    obj,
                    "HourglassUnknownQueue",
                    [
                        f"queue {ev.queue!r} (label {kube.LABEL_QUEUE}) does not exist (yet); the pod stays pending"
                        " until it is created",
                    ],
                )
        st["uid"] = uid or st.get("uid")
        view = kube.pod_view(obj)
        if not view.node and key not in self._claimants and kube.pod_claims(obj):
            self._claimants[key] = obj  # submitted before this process started: follow its claims too
        ns, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        if st.get("gated") and not (obj.get("spec") or {}).get("schedulingGates"):
            self._emit(batch, PodUngated(name=name, namespace=ns, at_ms=self._at()))
        annotations = meta.get("annotations") or {}
        if not view.node and kube.ANNOTATION_GPU_DEVICES in annotations:
            st["devices_while_pending"] = True  # not the binder's: it writes them only with the bind
        if view.node and not st.get("node"):
            devices = self._gpu_devices(batch, obj, st, known_pending)
            self._emit(
                batch,
                PodBound(name=name, namespace=ns, node=view.node, gpu_devices=devices, at_ms=self._at()),
            )
        if view.releasing and not st.get("releasing"):
            self._emit(
                batch, PodReleasing(name=name, namespace=ns, reason="deletionTimestamp set", at_ms=self._at())
            )
        if view.finished and not st.get("finished"):
            phase: Literal["Succeeded", "Failed"] = "Succeeded" if view.finished == "Succeeded" else "Failed"
            self._emit(batch, PodFinished(name=name, namespace=ns, phase=phase, at_ms=self._at()))

    def _gpu_devices(
        self, batch: _Batch, obj: dict[str, Any], st: dict[str, Any], known_pending: bool
    ) -> list[int]:
        """The device indices of a pod seen bound now: its ``hourglass.io/gpu-devices`` annotation when the
        binder wrote it, else [] (with a Warning Event when a value was there but not trusted).

        Only the binder is trusted. It writes the annotation in the ``pods/binding`` call that sets
        ``spec.nodeName``, together with ``hourglass.io/cycle-id``. So the value is taken only when this
        ingest saw the pod pending without it, and the update that shows the pod bound carries both. A pod
        created already bound, a value set while the pod was pending, or one without the cycle id is
        ignored: the pod still holds its GPUs, as devices the session chooses (``unknown devices``, see
        docs/reliability.md), so ignoring a value never over-commits a node.
        """
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        raw = annotations.get(kube.ANNOTATION_GPU_DEVICES)
        if raw is None:
            return []
        why = (
            "the pod was bound before Hourglass saw it pending"
            if not known_pending
            else "it was set while the pod was pending"
            if st.get("devices_while_pending")
            else f"the bind carries no {kube.ANNOTATION_CYCLE}"
            if not annotations.get(kube.ANNOTATION_CYCLE)
            else None
        )
        if why is None:
            return _devices(raw)
        message = (
            f"annotation {kube.ANNOTATION_GPU_DEVICES}={str(raw)[:64]!r} ignored: only the Hourglass binder sets"
            f" it, and {why}; the pod's GPUs are held on devices the scheduler chooses"
        )
        log.warning("pod %s: %s", kube.object_key(obj), message)
        self._warn(batch, "Pod", obj, "HourglassUntrustedGpuDevices", [message])
        return []

    def _volumes(self, obj: dict[str, Any], claims: list[tuple[str, bool]]) -> list[VolumeClaim]:
        """Resolve a pod's claims: a bound volume's node affinity and zone labels, or the StorageClass's
        binding mode; for a WaitForFirstConsumer claim, the volumes it could bind to and where its class
        provisions (with CSI storage capacity, where there is room); ReadWriteOncePod and the CSI volume
        each attaches; a generic ephemeral volume's claim must exist and be the pod's
        (:mod:`ingest.kube.volumes`). Read from the watched objects, or from the API server for a kind
        ingest may not watch."""
        ns = str((obj.get("metadata") or {}).get("namespace") or "")
        out = []
        pvs: list[dict[str, Any]] | None = None
        capacities: list[dict[str, Any]] | None = None
        for claim, ephemeral in claims:
            pvc = self._read(
                "PersistentVolumeClaim",
                f"{ns}/{claim}",
                f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{claim}",
            )
            if ephemeral and (pvc is None or not kube_volumes.is_for_pod(obj, pvc)):
                problem = "missing" if pvc is None else "not_owned"
                out.append(
                    VolumeClaim.model_validate(
                        {"claim": claim, "bound": False, "ephemeral": True, problem: True}
                    )
                )
                continue
            spec = (pvc or {}).get("spec") or {}
            name = spec.get("volumeName")
            pv = self._read("PersistentVolume", name, f"/api/v1/persistentvolumes/{name}") if name else None
            sc_name = kube_volumes.claim_class(pvc) if pvc is not None and (not name or pv is None) else ""
            sc = (
                self._read("StorageClass", sc_name, f"/apis/storage.k8s.io/v1/storageclasses/{sc_name}")
                if sc_name
                else None
            )
            if sc is not None and sc.get("volumeBindingMode") == "WaitForFirstConsumer" and pvs is None:
                pvs = self._read_all("PersistentVolume", "/api/v1/persistentvolumes")
            resolved = kube_volumes.claim(claim, pvc, pv, sc, pvs)
            driver = None
            if resolved.get("provision") and sc is not None:
                prov = str(sc.get("provisioner") or "")
                driver = self._read("CSIDriver", prov, f"/apis/storage.k8s.io/v1/csidrivers/{prov}")
                if (
                    driver is not None
                    and capacities is None
                    and (driver.get("spec") or {}).get("storageCapacity")
                ):
                    capacities = self._read_all(
                        "CSIStorageCapacity", "/apis/storage.k8s.io/v1/csistoragecapacities"
                    )
            extra = kube_volumes.storage_fields(pvc, pv, sc, driver, capacities, resolved)
            if ephemeral:
                extra["ephemeral"] = True
            out.append(VolumeClaim.model_validate(resolved | extra))
        return out

    def _csi_node(self, batch: _Batch, name: str) -> None:
        """Upsert a node's CSINode with the volumes its VolumeAttachments attach (``getNodeVolumeAttachmentInfo``:
        an attacher, a PersistentVolume that exists and is CSI: its handle)."""
        obj = self._csinodes.get(name)
        if obj is None:
            return
        attached = []
        for key in sorted(self._vas):
            spec = self._vas[key].get("spec") or {}
            pv_name = (spec.get("source") or {}).get("persistentVolumeName")
            if spec.get("nodeName") != name or not spec.get("attacher") or not pv_name:
                continue
            pv = self._read("PersistentVolume", pv_name, f"/api/v1/persistentvolumes/{pv_name}")
            handle = ((pv or {}).get("spec") or {}).get("csi", {}).get("volumeHandle")
            if handle:
                attached.append((str(spec["attacher"]), str(handle)))
        try:
            self._upsert(batch, kube.csi_node_upserted(obj, self._at(), attached), f"CSINode/{name}")
        except kube.InvalidObject as err:
            self._reject(batch, "CSINode", obj, err)

    def _attachment(self, batch: _Batch, key: str, obj: dict[str, Any] | None) -> None:
        """A VolumeAttachment changed (None: deleted): upsert the CSINode of the node(s) it names."""
        old = self._vas.pop(key, None)
        if obj is not None:
            self._vas[key] = obj
        nodes = {str(((o or {}).get("spec") or {}).get("nodeName") or "") for o in (old, obj)}
        for name in sorted(nodes - {""}):
            self._csi_node(batch, name)

    def _wait_for_claim(self, v: VolumeClaim) -> bool:
        """Submit the pod only once this claim can be weighed: an unbound Immediate claim is about to be
        bound. A generic ephemeral volume's claim that is missing or not the pod's is submitted as such
        (the engine says why it waits) when claims are watched, so its creation reaches the pod."""
        if v.ephemeral and (v.missing or v.not_owned):
            return "PersistentVolumeClaim" not in self._storage
        return not v.bound and v.binding_mode == "Immediate"

    def _read(self, kind: str, key: str, path: str) -> dict[str, Any] | None:
        """One storage object: from the watched cache, else from the API server."""
        cache = self._storage.get(kind)
        if cache is not None:
            return cache.get(key)
        return self.api.get(path)

    def _read_all(self, kind: str, path: str) -> list[dict[str, Any]]:
        """Every object of a storage kind, sorted by key: from the watched cache, else a LIST."""
        cache = self._storage.get(kind)
        if cache is not None:
            return [cache[k] for k in sorted(cache)]
        return list((self.api.get(path) or {}).get("items") or [])

    def _storage_listed(self, item: _Listed, batch: _Batch) -> None:
        """A full list of a storage kind replaces its cache (an absent kind is read from the API again)."""
        if item.absent:
            self._storage.pop(item.kind, None)
            return
        self._storage[item.kind] = {kube.object_key(o): o for o in item.items}
        self._storage_moved(batch)

    def _storage_moved(self, batch: _Batch) -> None:
        """A storage object changed: resolve the claims of pending pods (and of other schedulers' pods)
        again; a pod whose resolution differs gets a PodVolumesChanged (foreign pods an upsert)."""
        for key in sorted(self._claimants):
            obj = self._claimants[key]
            st = self.pods.get(key)
            if st is None or st.get("node"):
                self._claimants.pop(key, None)
                self._vol_digest.pop(key, None)
                continue
            try:
                volumes = self._volumes(obj, kube.pod_claims(obj))
            except Exception as exc:  # a claim that cannot be read now: the next change tries again
                log.warning("pod %s: claims not resolved again (%s)", key, exc)
                continue
            digest = _volumes_digest(volumes)
            if self._vol_digest.get(key) != digest:
                self._vol_digest[key] = digest
                ns, _, name = key.partition("/")
                self._emit(
                    batch, PodVolumesChanged(name=name, namespace=ns, volumes=volumes, at_ms=self._at())
                )
        if self._vas:  # an attached volume's handle comes from its PersistentVolume
            for name in sorted(self._csinodes):
                self._csi_node(batch, name)
        for key in sorted(self._foreign_claimants):
            try:
                self._upsert(batch, self._foreign(self._foreign_claimants[key]), f"ForeignPod/{key}")
            except kube.InvalidObject as err:
                self._reject(batch, "ForeignPod", self._foreign_claimants[key], err)

    def _retry_later(self, item: _Changed, exc: BaseException) -> None:
        log.warning("pod %s: not submitted yet (%s), retrying in 2s", kube.object_key(item.obj), exc)
        self._retry[kube.object_key(item.obj)] = (time.monotonic() + 2.0, item)

    def _group(self, pod: dict[str, Any], batch: _Batch) -> tuple[str, str | None]:
        """Create or update the pod's PodGroup (KAI pod-grouper) and emit its upsert now.

        Returns the PodGroup's name and the subgroup the pod joins (None without subgroups, or when the pod
        already names one with its own ``kai.scheduler/subgroup-name`` label).
        """
        owners = self._owners.pop(kube.object_key(pod), None)
        if owners is None:
            owners = resolve_owners(pod, self._owner_get)
        skipped = skip_podgrouper(pod, owners)
        if skipped is not None:
            raise kube.InvalidObject(
                "Pod",
                kube.object_key(pod),
                f"metadata.annotations[{kube.ANNOTATION_POD_GROUP}]",
                None,
                f"is required: {ANNOTATION_SKIP_PODGROUPER} is set on {skipped}, so its PodGroup is made outside"
                " the pod-grouper and the pod must name it",
            )
        plan = plan_pod_group(pod, owners, self._owner_get)
        own = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_SUBGROUP)
        subgroup = None if own else plan.pod_subgroup
        plan = dataclasses.replace(plan, pod_subgroup=None)  # the PodGroup is the same for all its pods
        if self._planned.get((plan.namespace, plan.name)) == plan:
            return plan.name, subgroup
        made = self._made.pop((plan.namespace, plan.name), None)
        # The answer made ahead is this pod's only when it was made for the same plan; else ask now.
        obj, done = made[1].result() if made is not None and made[0] == plan else self._put_group(plan)
        if done == "created":
            self.stats.podgroups_created += 1
        elif done == "updated":
            self.stats.podgroups_updated += 1
        self._planned[(plan.namespace, plan.name)] = plan
        self.seen_rvs[f"PodGroup/{plan.namespace}/{plan.name}"] = str(
            (obj.get("metadata") or {}).get("resourceVersion") or ""
        )
        try:
            self._upsert(batch, self._podgroup_event(obj), f"PodGroup/{plan.namespace}/{plan.name}")
        except kube.InvalidObject as err:
            self._reject(batch, "PodGroup", obj, err)
        return plan.name, subgroup

    # ------------------------------------------------------------------ Kubernetes Events

    def _post_notices(self, batch: _Batch) -> None:
        for kind, obj, reason, message in batch.notices:
            try:
                self._post_event(kind, obj, reason, message)
                self.stats.warnings_posted += 1
            except Exception as exc:  # an Event is a courtesy; never let it stop ingest
                log.warning("could not post a %s Event on %s %s: %s", reason, kind, kube.object_key(obj), exc)

    def _post_event(self, kind: str, obj: dict[str, Any], reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        ns = str(meta.get("namespace") or CLUSTER_EVENT_NAMESPACE)
        # A name derived from the object version and the message: a restart re-posting it gets 409.
        digest = _digest(f"{meta.get('uid')}|{meta.get('resourceVersion')}|{reason}|{message}")[:12]
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        api_version = str(obj.get("apiVersion") or _API_VERSIONS.get(kind, "v1"))
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{str(meta.get('name'))[:200]}.hg-{digest}", "namespace": ns},
            "involvedObject": {
                "apiVersion": api_version,
                "kind": kind,
                "name": meta.get("name"),
                **({"namespace": meta["namespace"]} if meta.get("namespace") else {}),
                **({"uid": meta["uid"]} if meta.get("uid") else {}),
                **({"resourceVersion": meta["resourceVersion"]} if meta.get("resourceVersion") else {}),
            },
            "reason": reason,
            "message": message[:_EVENT_MESSAGE_MAX],
            "type": "Warning",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": socket.gethostname(),
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self.api.request("POST", f"/api/v1/namespaces/{ns}/events", body=body)
        except KubeError as exc:
            if exc.status != 409:
                raise

    # ------------------------------------------------------------------ state file

    def _state(self, pending: dict[str, Any] | None) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "topics": {"events": self.topics.events, "deadletter": self.topics.deadletter},
            "scheduler_name": self.scheduler_name,
            "namespace": self.namespace,
            "resource_versions": self.rvs,
            "last_at_ms": self.last_at_ms,
            "objects": self.objects,
            "pods": self.pods,
            "rejected": self.rejected,
            "warned": self.warned,
            "pending": {
                t: {"start": p["start"], "records": [[k.decode(), v.decode()] for k, v in p["records"]]}
                for t, p in (pending or {}).items()
                if p["records"]
            },
        }

    def _save_state(self, pending: dict[str, Any] | None) -> None:
        self._dirty_since = None
        if self.state_path is None or self._failed:
            return
        # Written whole once per batch, so the encoder's speed is ingest's: msgspec's is ~10x json's.
        data = msgspec.json.encode(self._state(pending), order="sorted")
        tmp = self.state_path.with_name(self.state_path.name + ".tmp")
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.state_path)
        dfd = os.open(self.state_path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def _maybe_checkpoint(self) -> None:
        if (
            self._dirty_since is not None
            and time.monotonic() - self._dirty_since >= self.checkpoint_interval_s
        ):
            self._save_state(None)

    def _load_state(self) -> bool:
        if self.state_path is None or not self.state_path.exists():
            return False
        try:
            data = json.loads(self.state_path.read_text())
        except (OSError, ValueError) as exc:
            log.warning("state file %s unreadable (%s); rebuilding from the log", self.state_path, exc)
            return False
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            log.warning("state file %s has an unknown version; rebuilding from the log", self.state_path)
            return False
        same_scope = (
            data.get("scheduler_name") == self.scheduler_name and data.get("namespace") == self.namespace
        )
        self.rvs = dict(data.get("resource_versions") or {}) if same_scope else {}
        self.last_at_ms = int(data.get("last_at_ms") or 0)
        self.objects = dict(data.get("objects") or {})
        self.pods = {k: dict(v) for k, v in (data.get("pods") or {}).items()}
        self.rejected = dict(data.get("rejected") or {})
        self.warned = dict(data.get("warned") or {})
        for topic, p in (data.get("pending") or {}).items():
            records = [(k.encode(), v.encode()) for k, v in p.get("records") or []]
            self._finish_append(topic, int(p.get("start") or 0), records)
        return True

    def _finish_append(self, topic: str, start: int, records: list[tuple[bytes, bytes]]) -> None:
        """Append the part of an interrupted write-ahead batch that is not in ``topic`` after ``start``."""
        if not records:
            return
        i = 0
        for r in self.log.scan(topic, start):
            if i == len(records):
                break
            if (r.key, r.value) == records[i]:
                i += 1
        missing = records[i:]
        if missing:
            log.info(
                "recovery: appending %d of %d records of an interrupted batch to %s",
                len(missing),
                len(records),
                topic,
            )
            self.log.append_many(topic, missing)
            if topic == self.topics.events:
                self.stats.recovered_events += len(missing)

    def _rebuild_from_log(self) -> None:
        """No state file: fold the events topic into the dedupe state (resource versions unknown)."""
        for r in self.log.scan(self.topics.events, batch=5000):
            try:
                self._remember(parse_event(r.value))
                self.stats.rebuilt_from_log += 1
            except EventError:
                continue  # the scheduler dead-letters it; nothing to remember


def _volumes_digest(volumes: list[VolumeClaim]) -> str:
    return _digest("\n".join(v.model_dump_json() for v in volumes))


def _devices(raw: Any) -> list[int]:
    """The binder's ``hourglass.io/gpu-devices`` annotation ("0,3"); malformed or absent -> []."""
    if not isinstance(raw, str) or not raw:
        return []
    parts = raw.split(",")
    if not all(p.strip().isdigit() for p in parts):
        return []
    devices = [int(p) for p in parts]
    return devices if len(set(devices)) == len(devices) else []


# --------------------------------------------------------------------------- command line


def add_arguments(p: Any) -> None:
    """The ``ingest`` subcommand's arguments (``p`` is an ``argparse.ArgumentParser``)."""
    p.add_argument("--log", required=True, help="a FileLog directory or kafka://HOST:PORT")
    add_kubeconfig_argument(p)
    p.add_argument(
        "--state",
        default=None,
        help="the ingest state file (resourceVersions, dedupe state, write-ahead batch); default"
        " LOG/ingest-state.json for a FileLog; without one on Kafka the state is rebuilt from the log on start",
    )
    p.add_argument("--scheduler-name", default="hourglass", help="watch pods with this spec.schedulerName")
    p.add_argument("--namespace", default=None, help="watch pods and PodGroups of this namespace only")
    p.add_argument(
        "--no-pod-grouping",
        action="store_true",
        help="do not create PodGroups: pods must carry the pod-group-name annotation",
    )
    p.add_argument("--watch-timeout", type=int, default=60, help="server-side watch timeout in seconds")
    p.add_argument("--topic-prefix", default=None, help="use PREFIX.events, PREFIX.deadletter as topics")
    p.add_argument(
        "--once",
        action="store_true",
        help="relist everything, append what changed since the last run, and exit",
    )
    p.add_argument("--max-seconds", type=float, default=None, help="stop after this many seconds")


def run_cli(args: Any) -> int:
    """``hourglass ingest``: sync, then watch until SIGTERM / Ctrl-C (or ``--once`` / ``--max-seconds``)."""
    import signal
    import sys

    from ingest.backends import StartupError, open_log_for
    from ingest.kube.client import api_client_for, size_connection_pool
    from ingest.log import LogError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    topics = Topics.from_prefix(args.topic_prefix)
    try:
        api = api_client_for("ingest", args.kubeconfig)
        log_ = open_log_for("ingest", args.log, topics=topics.all(), role="ingest")
    except StartupError as e:
        print(e, file=sys.stderr)
        return 2
    size_connection_pool(api, len(RESOURCES) + GROUPING_WORKERS)  # a watch each, and the PodGroup workers
    state = Path(args.state) if args.state else default_state_path(args.log)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with log_:
        ingest = KubeIngest(
            KubeApi(api),
            log_,
            topics,
            state_path=state,
            scheduler_name=args.scheduler_name,
            namespace=args.namespace,
            group_pods=not args.no_pod_grouping,
            watch_timeout_s=args.watch_timeout,
        )
        try:
            ingest.start(watch=not args.once, relist=args.once)
            if not args.once:
                ingest.run(stop, args.max_seconds)
        except KeyboardInterrupt:
            pass
        except KubeError as e:
            hint = " (are the Queue / PodGroup CRDs installed? see deploy/crds)" if e.status == 404 else ""
            print(f"ingest: the API server refused: {e.status} {e.message}{hint}", file=sys.stderr)
            return 1
        except LogError as e:  # the state file keeps the unwritten batch; the next start appends it
            print(f"ingest: the log failed: {e}", file=sys.stderr)
            return 1
        finally:
            ingest.stop()
    st = ingest.stats
    print(
        f"ingest: {st.events} events appended, {st.dead_letters} dead letters, {st.warnings_posted} warnings"
        f" posted, {st.podgroups_created} PodGroups created ({st.podgroups_updated} updated), {st.lists} lists"
        f" ({st.relists_410} after 410), {st.recovered_events} recovered from an interrupted batch"
    )
    return 0
