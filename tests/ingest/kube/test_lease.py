"""Leader election on a Lease (ingest/kube/lease.py), against an in-memory API server that keeps the
Lease's ``resourceVersion`` as the real one does (a PUT with a stale version is a 409).

The cases follow client-go's ``leaderelection`` tests (``TestTryAcquireOrRenew``: acquire a missing
lease, refuse an unexpired one held by another, take an expired one, renew one's own).
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable
from typing import Any

import pytest

from ingest.kube.client import KubeError
from ingest.kube.lease import (
    LeaseElector,
    LeaseSettings,
    add_leader_election_arguments,
    lease_settings_from_args,
)


class FakeApi:
    """One namespace's Leases with optimistic concurrency; ``fail`` makes every call a 503."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.fail = False
        self.stale_get: dict[str, Any] | None = None  # answered to GETs instead of the stored lease
        self.before_post: Callable[[], None] | None = None  # another writer, just before a POST lands

    def request(self, method: str, path: str, query: dict[str, Any] | None = None, body: Any = None) -> Any:
        if self.fail:
            raise KubeError(503, "unavailable")
        if method == "GET" and self.stale_get is not None:
            return copy.deepcopy(self.stale_get)
        if method == "GET":
            name = path.rsplit("/", 1)[1]
            if name not in self.leases:
                raise KubeError(404, "not found")
            return copy.deepcopy(self.leases[name])
        name = body["metadata"]["name"]
        if method == "POST":
            if self.before_post is not None:
                hook, self.before_post = self.before_post, None
                hook()
            if name in self.leases:
                raise KubeError(409, "already exists")
        elif self.leases[name]["metadata"]["resourceVersion"] != body["metadata"].get("resourceVersion"):
            raise KubeError(409, "the object has been modified")
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.leases[name] = stored
        return copy.deepcopy(stored)

    def spec(self, name: str = "lease") -> dict[str, Any]:
        return dict(self.leases[name]["spec"])


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _elector(api: FakeApi, clock: Clock, who: str) -> LeaseElector:
    return LeaseElector(api, LeaseSettings("ns", "lease", who), clock=clock)


def test_the_first_instance_creates_the_lease_and_another_waits_while_it_renews() -> None:
    api, clock = FakeApi(), Clock()
    a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
    assert a.try_acquire_or_renew() and a.is_leader
    assert api.spec()["holderIdentity"] == "a" and api.spec()["leaseTransitions"] == 0
    assert api.spec()["leaseDurationSeconds"] == 15
    for _ in range(20):  # a renews every 2 s: b never sees the same record for 15 s
        clock.t += 2
        assert a.renew_once()
        assert not b.try_acquire_or_renew()
    assert api.spec()["holderIdentity"] == "a" and not b.is_leader


def test_a_standby_takes_over_one_lease_duration_after_it_last_saw_the_record_change() -> None:
    api, clock = FakeApi(), Clock()
    a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b first sees a's record at t=100
    clock.t += 14.9
    assert not b.try_acquire_or_renew()
    clock.t += 0.1
    assert b.try_acquire_or_renew() and b.is_leader
    spec = api.spec()
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
    # The old holder, back, finds another holder: leadership lost at once, not after a deadline.
    assert not a.renew_once() and a.lost and not a.is_leader


def test_of_two_standbys_racing_for_an_expired_lease_exactly_one_wins() -> None:
    api, clock = FakeApi(), Clock()
    a, b, c = _elector(api, clock, "a"), _elector(api, clock, "b"), _elector(api, clock, "c")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew() and not c.try_acquire_or_renew()
    clock.t += 15
    api.stale_get = api.request("GET", "/x/lease")
    assert b.try_acquire_or_renew()
    assert not c.try_acquire_or_renew()  # read the version b replaced: a 409, not a win
    api.stale_get = None
    assert api.spec()["holderIdentity"] == "b" and [b.is_leader, c.is_leader] == [True, False]


def test_the_leader_keeps_working_through_failures_shorter_than_the_renew_deadline() -> None:
    api, clock = FakeApi(), Clock()
    a = _elector(api, clock, "a")
    assert a.try_acquire_or_renew()
    api.fail = True
    clock.t += 9.9
    assert a.renew_once() and a.is_leader
    api.fail = False
    assert a.renew_once()
    api.fail = True
    clock.t += 10.0  # 10 s since the last successful renewal: stop before a standby may take over (15 s)
    assert not a.renew_once() and a.lost and not a.is_leader
    api.fail = False
    assert not a.renew_once()  # lost for good: the process exits and restarts as a standby


def test_release_hands_over_at_the_standbys_next_try() -> None:
    api, clock = FakeApi(), Clock()
    a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    assert api.spec()["holderIdentity"] == "" and not a.is_leader
    assert b.try_acquire_or_renew()  # no lease duration waited
    assert api.spec()["holderIdentity"] == "b"
    a.release()  # no longer the holder: b's lease is left alone
    assert api.spec()["holderIdentity"] == "b"


def test_a_failed_create_or_read_is_an_error_but_a_lost_create_race_is_not() -> None:
    api, clock = FakeApi(), Clock()
    a, b = _elector(api, clock, "a"), _elector(api, clock, "b")
    api.fail = True
    with pytest.raises(KubeError):
        a.try_acquire_or_renew()
    api.fail = False
    b_lease = {"metadata": {"name": "lease"}, "spec": {"holderIdentity": "b", "leaseDurationSeconds": 15}}
    api.before_post = lambda: api.request("POST", "/x", body=b_lease)
    assert not a.try_acquire_or_renew()  # b created it between a's GET and POST
    assert api.spec()["holderIdentity"] == "b" and not b.is_leader


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        ([], "hourglass-scheduler"),
        (["--node-pool", "a"], "hourglass-scheduler-pool-a"),
        (["--node-pool", ""], "hourglass-scheduler-pool"),
        (["--node-pool", "a", "--lease-name", "mine"], "mine"),
    ],
)
def test_each_shard_elects_on_its_own_lease(argv: list[str], name: str) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--node-pool", default=None)
    add_leader_election_arguments(p, "hourglass-scheduler")
    args = p.parse_args(["--leader-elect", "--lease-namespace", "hg", *argv])
    settings = lease_settings_from_args(args, "hourglass-scheduler")
    assert settings is not None and (settings.name, settings.namespace) == (name, "hg")
    assert lease_settings_from_args(p.parse_args(argv), "hourglass-scheduler") is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--node-pool", "Pool_A"], "not a DNS subdomain: set --lease-name"),
        (["--lease-name", "Bad_Name"], "--lease-name 'Bad_Name' is not a DNS subdomain"),
        (["--lease-renew-deadline", "20"], "retry period < renew deadline < lease duration"),
        (["--lease-retry-period", "0"], "retry period < renew deadline < lease duration"),
    ],
)
def test_bad_election_settings_are_refused_by_name(argv: list[str], message: str) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--node-pool", default=None)
    add_leader_election_arguments(p, "hourglass-binder")
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        lease_settings_from_args(p.parse_args(["--leader-elect", *argv]), "hourglass-binder")
