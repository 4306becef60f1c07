"""Leader election through a ``coordination.k8s.io/v1`` Lease, for ``hourglass run`` and ``hourglass bind``.

KAI's chart runs its scheduler and binder with standby replicas and leader election; so can Hourglass
(``--leader-elect``). One instance holds the Lease and works; the others wait. The rules are client-go's
``leaderelection`` package, written as a small loop over :class:`~ingest.kube.client.KubeApi` rather than
the Python client's ``kubernetes.leaderelection`` (which runs its callbacks on its own thread, never
releases on shutdown, and judges expiry by comparing the holder's ``renewTime`` with the local wall clock,
so clock skew between machines shortens or stretches a takeover):

* **Acquire**: GET the Lease (create it when missing). It may be taken when it has no holder, or when its
  record (holder, ``renewTime``, ``resourceVersion``) has not changed for ``leaseDurationSeconds`` as
  measured by *this* process's monotonic clock since it first saw that record. The take is a PUT carrying
  the read ``resourceVersion``: of two standbys racing, the API server accepts one and answers 409 to
  the other.
* **Renew**: the holder PUTs a new ``renewTime`` every ``retry_period_s``. When no renewal has succeeded
  for ``renew_deadline_s`` (< the lease duration), or the Lease names another holder, leadership is lost:
  the callback stops the work and the process exits non-zero, as kube-scheduler does, to restart as a
  standby. Because the deadline is shorter than the duration, a holder cut off from the API server stops
  before any standby may take over.
* **Release**: on an orderly stop (SIGTERM) the holder clears ``holderIdentity``, so a standby takes over
  at its next retry instead of a lease duration later. A SIGKILLed holder releases nothing; a standby
  takes over within ``lease duration + retry period`` of its last renewal.

Exactly-once across a hand-over does not rest on the Lease: cycle ids derive from the inputs, and the
binder resumes from its committed decisions position (docs/service.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from ingest.kube.client import KubeError

__all__ = [
    "LeaseElector",
    "LeaseSettings",
    "add_leader_election_arguments",
    "elect",
    "lease_settings_from_args",
    "signal_self",
]

log = logging.getLogger(__name__)

#: A Lease name is a DNS subdomain.
_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
LEASES: Final = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
_SA_NAMESPACE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class LeaseApi(Protocol):
    """What the elector needs of :class:`~ingest.kube.client.KubeApi`."""

    def request(self, method: str, path: str, query: dict[str, Any] | None = None, body: Any = None) -> Any:
        """A JSON request; :class:`KubeError` on a non-2xx answer."""
        ...


@dataclass(frozen=True)
class LeaseSettings:
    """One Lease and the timing of its election (client-go's defaults: 15 s, 10 s, 2 s)."""

    namespace: str
    name: str
    identity: str
    duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def __post_init__(self) -> None:
        if not self.namespace or not self.name or not self.identity:
            raise ValueError("leader election needs a lease namespace, a lease name and an identity")
        if not 0 < self.retry_period_s < self.renew_deadline_s < self.duration_s:
            raise ValueError(
                "leader election timing must satisfy 0 < retry period < renew deadline < lease duration,"
                f" got {self.retry_period_s} / {self.renew_deadline_s} / {self.duration_s} s"
            )


def _micro_time(at: datetime) -> str:
    """A Kubernetes ``MicroTime``: RFC 3339 with microseconds, UTC."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    """Acquire, hold and release one Lease (the module doc has the rules).

    ``clock`` (monotonic seconds) times expiry and deadlines; ``wall`` only stamps ``acquireTime`` /
    ``renewTime`` for people reading the Lease. Both are injectable for tests.
    """

    def __init__(
        self,
        api: LeaseApi,
        settings: LeaseSettings,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.api = api
        self.settings = settings
        self._clock = clock
        self._wall = wall
        self._observed: tuple[str, str, str] | None = None  # (holder, renewTime, resourceVersion)
        self._observed_at = 0.0
        self._observed_duration = settings.duration_s
        self._last_renew = 0.0
        self.is_leader = False
        self.lost = False
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def path(self) -> str:
        """The Lease object's API path."""
        return LEASES.format(namespace=self.settings.namespace) + "/" + self.settings.name

    def _spec(self, acquire_time: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.settings.identity,
            "leaseDurationSeconds": max(1, round(self.settings.duration_s)),
            "acquireTime": acquire_time,
            "renewTime": _micro_time(self._wall()),
            "leaseTransitions": transitions,
        }

    def _observe(self, lease: dict[str, Any]) -> dict[str, Any]:
        """Note the Lease's record; restart the expiry timer when it changed since last seen."""
        spec = lease.get("spec") or {}
        record = (
            str(spec.get("holderIdentity") or ""),
            str(spec.get("renewTime") or ""),
            str((lease.get("metadata") or {}).get("resourceVersion") or ""),
        )
        if record != self._observed:
            self._observed = record
            self._observed_at = self._clock()
            duration = spec.get("leaseDurationSeconds")
            self._observed_duration = (
                float(duration) if isinstance(duration, int) and duration > 0 else (self.settings.duration_s)
            )
        return spec

    def try_acquire_or_renew(self) -> bool:
        """One attempt: create, renew or take over the Lease. True when this instance holds it now.

        A 409 (another instance wrote first) is a lost race, False; other API failures raise
        :class:`KubeError`."""
        s = self.settings
        try:
            lease = self.api.request("GET", self.path)
        except KubeError as e:
            if e.status != 404:
                raise
            now = _micro_time(self._wall())
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": s.name, "namespace": s.namespace},
                "spec": self._spec(now, 0),
            }
            try:
                created = self.api.request("POST", LEASES.format(namespace=s.namespace), body=body)
            except KubeError as e2:
                if e2.status == 409:
                    return False
                raise
            return self._won(created, took_over=True)
        spec = self._observe(lease)
        holder = str(spec.get("holderIdentity") or "")
        mine = holder == s.identity
        expired = self._clock() >= self._observed_at + self._observed_duration
        if holder and not mine and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        acquire_time = str(spec.get("acquireTime") or "") if mine else _micro_time(self._wall())
        new = {**lease, "spec": self._spec(acquire_time, transitions if mine else transitions + 1)}
        try:
            updated = self.api.request("PUT", self.path, body=new)
        except KubeError as e:
            if e.status == 409:
                return False
            raise
        return self._won(updated, took_over=not mine)

    def _won(self, lease: Any, took_over: bool) -> bool:
        if isinstance(lease, dict):
            self._observe(lease)
        self._last_renew = self._clock()
        if took_over or not self.is_leader:
            log.info("lease %s acquired by %s", self.path, self.settings.identity)
        self.is_leader = True
        return True

    def acquire(self, stop: threading.Event | None = None) -> bool:
        """Block until this instance holds the Lease (True) or ``stop`` is set (False), trying every retry
        period. API failures are logged and retried: a standby waits through an API server outage."""
        stop = stop or threading.Event()
        waiting_logged = False
        while not stop.is_set():
            try:
                if self.try_acquire_or_renew():
                    return True
            except KubeError as e:
                log.warning("lease %s: %s", self.path, e)
            if not waiting_logged and self._observed is not None:
                log.info("standby: lease %s is held by %s", self.path, self._observed[0] or "nobody")
                waiting_logged = True
            stop.wait(self.settings.retry_period_s)
        return False

    def renew_once(self) -> bool:
        """One renewal of a held Lease; False once leadership is lost (another holder, or no successful
        renewal for the renew deadline)."""
        if self.lost:
            return False
        try:
            if self.try_acquire_or_renew():
                return True
            reason = f"held by {self._observed[0] if self._observed else 'another instance'}"
        except KubeError as e:
            if self._clock() - self._last_renew < self.settings.renew_deadline_s:
                log.warning("lease %s: renewal failed, retrying: %s", self.path, e)
                return True
            reason = f"not renewed for {self.settings.renew_deadline_s:g} s ({e})"
        self.is_leader = False
        self.lost = True
        log.error("lease %s lost: %s", self.path, reason)
        return False

    def keep(self, on_lost: Callable[[], None]) -> None:
        """Renew on a daemon thread every retry period until :meth:`release`; call ``on_lost`` once if
        leadership is lost."""

        def loop() -> None:
            while not self._done.wait(self.settings.retry_period_s):
                if not self.renew_once():
                    on_lost()
                    return

        self._thread = threading.Thread(target=loop, name="lease-renew", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop renewing and, if still the holder, clear ``holderIdentity`` so a standby takes over at once.
        Best effort: a failure only means the standby waits out the lease duration."""
        self._done.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=self.settings.retry_period_s + 30)
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            lease = self.api.request("GET", self.path)
            spec = (lease or {}).get("spec") or {}
            if spec.get("holderIdentity") != self.settings.identity:
                return
            spec = {
                **spec,
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "renewTime": _micro_time(self._wall()),
            }
            self.api.request("PUT", self.path, body={**lease, "spec": spec})
            log.info("lease %s released", self.path)
        except KubeError as e:
            log.warning("lease %s not released: %s", self.path, e)


def _default_namespace() -> str:
    """$POD_NAMESPACE, else the service account's namespace file, else ``default``."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        with open(_SA_NAMESPACE) as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


def default_identity() -> str:
    """``<hostname>_<random>`` as kube-scheduler names itself: the pod name in a Deployment, unique even
    when a restarted container keeps its hostname."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def add_leader_election_arguments(p: argparse.ArgumentParser, default_lease: str) -> None:
    """The ``--leader-elect`` options of a command whose Lease is named ``default_lease`` by default."""
    p.add_argument(
        "--leader-elect",
        action="store_true",
        help="run as one of several replicas: work only while holding a coordination.k8s.io Lease, wait as"
        " a standby otherwise (docs/deploy.md)",
    )
    p.add_argument(
        "--lease-name",
        default=None,
        help=f"the Lease's name (default {default_lease}, with -pool-<POOL> for a --node-pool shard)",
    )
    p.add_argument(
        "--lease-namespace", default=None, help="the Lease's namespace (default $POD_NAMESPACE, else default)"
    )
    p.add_argument(
        "--lease-identity", default=None, help="this instance's holder identity (default host_random)"
    )
    p.add_argument("--lease-duration", type=float, default=15.0, help="seconds a standby waits (default 15)")
    p.add_argument(
        "--lease-renew-deadline",
        type=float,
        default=10.0,
        help="seconds the leader keeps working without a successful renewal (default 10)",
    )
    p.add_argument("--lease-retry-period", type=float, default=2.0, help="seconds between tries (default 2)")


def lease_settings_from_args(args: argparse.Namespace, default_lease: str) -> LeaseSettings | None:
    """The :class:`LeaseSettings` of a command's arguments; None without ``--leader-elect``. Each node-pool
    shard elects its own leader: its Lease name carries the pool. ValueError on inconsistent timing."""
    if not getattr(args, "leader_elect", False):
        return None
    name = args.lease_name
    if name is None:
        pool = getattr(args, "node_pool", None)
        name = (
            default_lease
            if pool is None
            else f"{default_lease}-pool-{pool}"
            if pool
            else f"{default_lease}-pool"
        )
        if not _NAME.fullmatch(name):
            raise ValueError(
                f"the node pool makes the Lease name {name!r}, not a DNS subdomain: set --lease-name"
            )
    elif not _NAME.fullmatch(name):
        raise ValueError(
            f"--lease-name {name!r} is not a DNS subdomain (lower-case letters, digits, '-', '.')"
        )
    return LeaseSettings(
        namespace=args.lease_namespace or _default_namespace(),
        name=name,
        identity=args.lease_identity or default_identity(),
        duration_s=args.lease_duration,
        renew_deadline_s=args.lease_renew_deadline,
        retry_period_s=args.lease_retry_period,
    )


def elect(command: str, args: argparse.Namespace, default_lease: str) -> LeaseElector | None:
    """For a command's start: None without ``--leader-elect``; otherwise block as a standby until this
    instance holds the Lease, and return its elector (``is_leader`` False when SIGTERM came first: the
    command exits 0 without having worked). Renewal starts at once, before the command's own start-up
    (which may outlast a lease duration); losing the Lease sends this process SIGTERM
    (:func:`signal_self`), handled by whatever SIGTERM handler the command has installed by then. The
    caller calls :meth:`LeaseElector.release` when done and exits non-zero when ``lost``.

    Bad timing, lease name or kubeconfig: :class:`~ingest.backends.StartupError` naming the command."""
    from ingest.backends import StartupError
    from ingest.kube.client import KubeApi, api_client_for

    try:
        settings = lease_settings_from_args(args, default_lease)
    except ValueError as e:
        raise StartupError(f"{command}: {e}") from None
    if settings is None:
        return None
    elector = LeaseElector(KubeApi(api_client_for(command, getattr(args, "kubeconfig", None))), settings)
    stop = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        log.info("%s: waiting for lease %s as %s", command, elector.path, settings.identity)
        elector.acquire(stop)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if elector.is_leader:
        elector.keep(on_lost=signal_self)
    return elector


def signal_self() -> None:
    """The usual ``on_lost``: SIGTERM to this process, so the command stops the way an orderly stop does
    (its handler runs on the main thread and abandons a cycle in progress, which has written nothing)."""
    os.kill(os.getpid(), signal.SIGTERM)
