"""Host-port tables of a node: (protocol, port) -> host IP -> number of pods binding it."""

from __future__ import annotations

from scheduler.engine.state import HostPort

PortTable = dict[tuple[str, int], dict[str, int]]


def hold(table: PortTable, ports: tuple[HostPort, ...], sign: int) -> None:
    """Add (sign 1) or remove (-1) a pod's ports from a node's table."""
    for p in ports:
        ips = table.setdefault((p.protocol, p.port), {})
        n = ips.get(p.host_ip, 0) + sign
        if n:
            ips[p.host_ip] = n
        else:
            ips.pop(p.host_ip, None)
            if not ips:
                del table[(p.protocol, p.port)]
