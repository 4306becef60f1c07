"""Host ports (kube-scheduler's NodePorts filter): two pods cannot bind the same protocol and port on one
node unless they bind different, specific host IPs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler.engine.state import HostPort

if TYPE_CHECKING:
    from scheduler.engine.session import NodeInfo

REASON = "node(s) didn't have free ports for the requested pod ports"
_ANY = ("", "0.0.0.0")  # kube-scheduler's wildcard (an empty host IP is 0.0.0.0); "::" is a specific IP to it


def _conflict(held: dict[tuple[str, int], dict[str, int]], p: HostPort) -> bool:
    ips = held.get((p.protocol, p.port))
    if not ips:
        return False
    if p.host_ip in _ANY:
        return True
    return any(n > 0 and (ip in _ANY or ip == p.host_ip) for ip, n in ips.items())


def ports_reason(node: NodeInfo, ports: tuple[HostPort, ...]) -> tuple[str | None, bool]:
    """(reason, idle): a port held by a running or placed pod blocks the node; one held only by a
    releasing pod leaves the node usable once that pod is gone (pipelining)."""
    idle = True
    for p in ports:
        if _conflict(node.ports_held, p):
            return REASON, False
        if _conflict(node.ports_rel, p):
            idle = False
    return None, idle
