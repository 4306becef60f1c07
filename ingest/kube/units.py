"""Exact parsers from Kubernetes quantity strings to Hourglass integer units.

Every parser returns an ``int`` in the engine's unit (millicores, bytes,
milli-GPU) or raises ``ValueError`` with a message naming the offending input.
Nothing is clamped or silently rounded, with one documented exception: GPU
amounts below one device follow KAI's two-decimal fixed point (see
:func:`parse_gpu_milli`).

The accepted grammar is Kubernetes' ``resource.Quantity``: an optional sign,
a decimal number, then one suffix, which is a binary-SI unit (``Ki`` … ``Ei``),
a decimal-SI unit (``n u m k M G T P E``) or an exponent (``e9``, ``E-3``).
Arithmetic is done on exact rationals, never on floats.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

__all__ = [
    "decimal_text",
    "parse_bytes",
    "parse_cpu_millicores",
    "parse_fraction_milli",
    "parse_gpu_milli",
]

Quantity = str | int | float

_INT64_MAX = 2**63 - 1
_NUMBER = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))(.*)", re.DOTALL)
_EXPONENT = re.compile(r"[eE]([+-]?\d+)")
_BINARY_SUFFIXES = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# Beyond this the value cannot be a sane int64 quantity; refusing early also
# keeps "1e999999999" from allocating a giant integer.
_MAX_EXPONENT = 64


def _parse_quantity(value: Quantity, kind: str) -> Fraction:
    """Parse a quantity to an exact rational; *kind* names it in error messages."""
    if isinstance(value, bool):  # bool is an int subclass; True is not "1 CPU"
        raise ValueError(f"{kind} quantity must be a number or string, got {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{kind} quantity must be finite, got {value!r}")
        # repr() is the shortest string that round-trips, so 0.1 means 1/10.
        text = repr(value)
    elif isinstance(value, str):
        text = value
    else:
        raise ValueError(f"{kind} quantity must be a number or string, got {type(value).__name__}")

    match = _NUMBER.fullmatch(text)
    if match is None:
        raise ValueError(f"invalid {kind} quantity {text!r}")
    number = Fraction(Decimal(match.group(1)))
    suffix = match.group(2)
    if suffix in _BINARY_SUFFIXES:
        return number * Fraction(1024) ** _BINARY_SUFFIXES[suffix]
    if suffix in _DECIMAL_SUFFIXES:
        exponent = _DECIMAL_SUFFIXES[suffix]
    elif (exp_match := _EXPONENT.fullmatch(suffix)) is not None:
        exponent = int(exp_match.group(1))
        if abs(exponent) > _MAX_EXPONENT:
            raise ValueError(f"exponent out of range in {kind} quantity {text!r}")
    else:
        raise ValueError(f"unknown unit {suffix!r} in {kind} quantity {text!r}")
    return number * Fraction(10) ** exponent


def _text(value: Quantity) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _to_int(amount: Fraction, value: Quantity, kind: str, unit: str) -> int:
    """Check sign, integrality and int64 range of an amount already in *unit*."""
    if amount < 0:
        raise ValueError(f"negative {kind} request {_text(value)}")
    if amount.denominator != 1:
        raise ValueError(f"{kind} quantity {_text(value)!r} is not a whole number of {unit}")
    if amount > _INT64_MAX:
        raise ValueError(f"{kind} quantity {_text(value)!r} is too large")
    return int(amount)


def parse_cpu_millicores(value: Quantity) -> int:
    """Parse a CPU quantity (``"500m"``, ``"2"``, ``"1.5"``, ``2``) to millicores.

    Values finer than one millicore (``"0.0005"``) are rejected, not rounded.
    """
    return _to_int(_parse_quantity(value, "CPU") * 1000, value, "CPU", "millicores")


def parse_bytes(value: Quantity) -> int:
    """Parse a memory quantity (``"16Gi"``, ``"1G"``, ``"1000"``, ``"1e9"``) to bytes.

    Fractional byte counts (``"0.5"``, ``"1.0001k"``) are rejected, not rounded.
    """
    return _to_int(_parse_quantity(value, "memory"), value, "memory", "bytes")


def _kai_round_centi(amount: Fraction) -> int:
    """Round a GPU amount to hundredths exactly as KAI does.

    KAI holds GPU portions as float64 and computes ``math.Round(portion * 100)``
    (``resource_info/gpu_resource_requirment.go``). We reproduce that bit for
    bit: the same float64 product, rounded half away from zero on its exact
    binary value. So ``"0.285"`` gives 28 (the float product is 28.4999…),
    as in KAI, not the 29 a decimal rounding would give.
    """
    product = float(amount) * 100
    return int(Decimal(product).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def parse_gpu_milli(value: Quantity) -> int:
    """Parse a GPU amount (whole devices ``2``/``"2"`` or a fraction ``"0.5"``) to milli-GPU.

    Whole amounts convert exactly (``2`` -> 2000). Non-whole amounts are rounded
    to two decimals like KAI (see :func:`_kai_round_centi`): ``0.5`` -> 500,
    ``0.333`` -> 330, ``1.5`` -> 1500. A non-zero amount that rounds to zero
    (``0.001``) is rejected rather than silently dropped.
    """
    amount = _parse_quantity(value, "GPU")
    if amount < 0:
        raise ValueError(f"negative GPU request {_text(value)}")
    if amount.denominator == 1:
        return _to_int(amount * 1000, value, "GPU", "milli-GPU")
    centi = _kai_round_centi(amount)
    if centi == 0:
        raise ValueError(f"GPU quantity {_text(value)!r} rounds to 0 at KAI's 0.01 GPU precision")
    return _to_int(Fraction(centi * 10), value, "GPU", "milli-GPU")


def parse_fraction_milli(value: Quantity) -> int:
    """Parse a ``gpu-fraction`` annotation (0 < f <= 1) to milli-GPU of one device.

    ``"0.5"`` -> 500, ``"1"`` -> 1000, ``"0.333"`` -> 330 (KAI's two-decimal
    rounding). Zero, values above 1 and values that round to zero are rejected.
    """
    amount = _parse_quantity(value, "GPU fraction")
    if amount < 0:
        raise ValueError(f"negative GPU fraction {_text(value)}")
    if amount == 0 or amount > 1:
        raise ValueError(f"GPU fraction must be > 0 and <= 1, got {_text(value)!r}")
    centi = _kai_round_centi(amount)
    if centi == 0:
        raise ValueError(f"GPU fraction {_text(value)!r} rounds to 0 at KAI's 0.01 GPU precision")
    return centi * 10


def decimal_text(value: int, scale: int) -> str:
    """``value / scale`` as an exact decimal string (``scale`` a power of ten): 1500, 1000 → "1.5"."""
    whole, frac = divmod(value, scale)
    if frac == 0:
        return str(whole)
    digits = len(str(scale)) - 1
    return f"{whole}.{frac:0{digits}d}".rstrip("0")


def parse_quantity(value: Quantity, kind: str = "storage") -> Fraction:
    """Any quantity (``"10Gi"``, ``"500M"``) as an exact rational, for comparisons such as a volume's
    capacity against a claim's request."""
    return _parse_quantity(value, kind)
