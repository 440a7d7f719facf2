"""Block hashes in JSON: a u64 hash is a JSON integer, a bytes hash a lowercase hex string.

Engines publish both kinds (DESIGN.md section 5); the framed protocol carries them natively,
JSON cannot carry bytes, so the HTTP APIs use this one convention both ways.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import PlainSerializer, PlainValidator, WithJsonSchema

from kvcast.serving.messages import MAX_HASH_BYTES, MAX_U64, BlockHash

_HEX = re.compile(rf"(?:[0-9a-fA-F]{{2}}){{1,{MAX_HASH_BYTES}}}")


def hash_from_json(value: Any) -> BlockHash:
    """An int in [0, 2**64) or an even-length hex string of 1..64 bytes; ValueError otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 <= value <= MAX_U64:
            return value
        raise ValueError("an integer block hash must be in [0, 2**64)")
    if isinstance(value, bytes) and 1 <= len(value) <= MAX_HASH_BYTES:
        return value  # built in Python (JSON input never holds bytes)
    if isinstance(value, str):
        if _HEX.fullmatch(value):
            return bytes.fromhex(value)
        raise ValueError(f"a string block hash must be hex of 1..{MAX_HASH_BYTES} bytes")
    raise ValueError("a block hash is a u64 integer or a hex string")


def hash_to_json(value: BlockHash) -> int | str:
    return value.hex() if isinstance(value, bytes) else value


def hash_from_header(text: str) -> BlockHash:
    """A hash written as text (an HTTP header, a URL path): ASCII decimal digits are a u64,
    ``0x`` then hex a bytes hash (the unambiguous form: ``1234`` is the integer), and other
    hex, for short, a bytes hash too; ValueError otherwise."""
    if text.isascii() and text.isdigit():
        try:
            return hash_from_json(decimal_u64(text))
        except ValueError as err:
            raise ValueError(f"an integer block hash {err}") from None
    return hash_from_json(text.removeprefix("0x"))


def decimal_u64(digits: str) -> int:
    """ASCII decimal ``digits`` (a header's u64) as an int; ValueError past 20 significant
    digits, before ``int()``, which refuses over 4300 with advice to raise a process-wide
    limit."""
    significant = digits.lstrip("0") or "0"
    if len(significant) > 20:
        raise ValueError(f"must be in [0, 2**64), got {len(digits)} digits")
    return int(significant)


def hash_to_header(value: BlockHash) -> str:
    """The header form :func:`hash_from_header` reads back as ``value``."""
    return "0x" + value.hex() if isinstance(value, bytes) else str(value)


JsonBlockHash = Annotated[
    BlockHash,
    PlainValidator(hash_from_json),
    PlainSerializer(hash_to_json),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": MAX_U64},
                {"type": "string", "pattern": f"^{_HEX.pattern}$"},
            ],
            "description": "u64 block hash, or a bytes hash as hex",
        }
    ),
]
