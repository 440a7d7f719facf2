"""Byte sizes as people write them: ``4096``, ``64KiB``, ``1.5 GiB``, ``100MB``."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Annotated

from pydantic import BeforeValidator

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}  # fmt: skip
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")


def parse_size(value: str | int) -> int:
    """Bytes in ``value``: an int, or a number with an optional unit (B, KB/MB/GB/TB in powers
    of 1000, KiB/MiB/GiB/TiB in powers of 1024; case-insensitive). ValueError when malformed
    or not a whole number of bytes."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a size")
    if isinstance(value, int):
        return value
    if not isinstance(value, str) or (match := _SIZE.fullmatch(value)) is None:
        raise ValueError(f"{value!r} is not a size (examples: 4096, 64KiB, 1.5GiB, 100MB)")
    number, unit = match.groups()
    if unit.lower() not in _UNITS:
        valid = "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"
        raise ValueError(f"{value!r}: unknown unit {unit!r}; valid: {valid}")
    amount = Fraction(number) * _UNITS[unit.lower()]
    if amount.denominator != 1:
        raise ValueError(f"{value!r} is not a whole number of bytes")
    return int(amount)


ByteSize = Annotated[int, BeforeValidator(parse_size)]
"""An int field that also accepts ``"64GiB"``-style strings (for configs and the CLI)."""
