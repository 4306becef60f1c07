"""Byte damage for the corruption tables: one byte of a file truncated at, flipped, zeroed, deleted or
inflated (a digit inserted), at its head, middle or tail."""

from __future__ import annotations


def damage_commit(data: bytes, kind: str, where: str = "middle") -> bytes:
    """*data* with one byte damaged by *kind* at *where* (``truncate`` at the head drops the first byte;
    elsewhere it cuts the file there)."""
    at = {"head": 0, "middle": len(data) // 2, "tail": len(data) - 1}[where]
    b = bytearray(data)
    if kind == "truncate":
        return bytes(b[1:] if where == "head" else b[:at])
    if kind == "flip":
        b[at] ^= 0x01
    elif kind == "zero":
        b[at] = 0
    elif kind == "delete":
        del b[at]
    elif kind == "inflate":
        b.insert(at, ord("9"))
    else:
        raise ValueError(f"unknown damage {kind!r}")
    return bytes(b)
