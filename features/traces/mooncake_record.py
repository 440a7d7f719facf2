"""One line of a Mooncake JSONL trace: decode it and validate its fields.

Types are strict (``true`` is not an integer, ``1.5`` is not a token count) and every reason
names the key and the offending value.
"""

from __future__ import annotations

import json
import math
from typing import Any

from kvcast.features.traces.block_ids import ID_RANGE, INT64_MIN, U64_MAX, is_block_id
from kvcast.features.traces.source import show

REQUIRED_KEYS: tuple[str, ...] = ("timestamp", "input_length", "output_length", "hash_ids")
Row = tuple[float, int, int, list[int], str]
Extra = tuple[str | None, str | None, int | None, int | None]
_INT64 = 2**63
_NO_EXTRA: Extra = (None, None, None, None)


class BadRecord(Exception):
    """One line's reason for rejection (the loader makes it ``FILE:LINE: reason``)."""


def _count(rec: dict[str, Any], key: str) -> int:
    value = rec[key]
    if type(value) is not int:
        raise BadRecord(f"{key} must be an integer, got {show(value)}")
    if not 0 <= value < _INT64:
        raise BadRecord(f"{key} must be a non-negative int64, got {value}")
    return value


def _timestamp(rec: dict[str, Any]) -> float:
    value = rec["timestamp"]
    if type(value) not in (int, float):
        raise BadRecord(f"timestamp must be a number, got {show(value)}")
    try:
        ts = float(value)
    except OverflowError:
        ts = math.inf
    if not math.isfinite(ts) or ts < 0:
        raise BadRecord(f"timestamp must be a finite number >= 0, got {show(value)}")
    return ts


def _hash_ids(rec: dict[str, Any]) -> list[int]:
    ids = rec["hash_ids"]
    if type(ids) is not list:
        raise BadRecord(f"hash_ids must be a list of integers, got {show(ids)}")
    if ids and set(map(type, ids)) != {int}:
        i, h = next((i, h) for i, h in enumerate(ids) if type(h) is not int)
        raise BadRecord(f"hash_ids[{i}] must be an integer, got {show(h)}")
    if ids and (min(ids) < INT64_MIN or max(ids) > U64_MAX):
        i, h = next((i, h) for i, h in enumerate(ids) if not is_block_id(h))
        raise BadRecord(f"hash_ids[{i}] must be a 64-bit block hash ({ID_RANGE}), got {show(h)}")
    return ids


def _optional_int(rec: dict[str, Any], key: str) -> int | None:
    value = rec.get(key)
    if value is not None and (type(value) is not int or not -_INT64 <= value < _INT64):
        raise BadRecord(f"{key} must be an int64 or null, got {show(value)}")
    return value


def _optional_label(rec: dict[str, Any], *keys: str) -> str | None:
    """The label under ``keys`` (aliases of one field): a null in one alias does not hide a
    value in another; two aliases giving different labels are an error naming both."""
    found: tuple[str, str] | None = None  # (key, label)
    for key in keys:
        value = rec.get(key)
        if value is None:
            continue
        if not ((type(value) is str and value) or type(value) is int):
            raise BadRecord(f"{key} must be a non-empty string or an integer, got {show(value)}")
        label = str(value)
        if found is None:
            found = (key, label)
        elif found[1] != label:
            first = found[0]
            raise BadRecord(
                f"{first} {show(rec[first])} and {key} {show(value)} disagree (aliases of one "
                "field: give one, or the same value in both)"
            )
    return found[1] if found is not None else None


def parse_line(raw: bytes) -> dict[str, Any]:
    """One line's JSON object, with every required key present."""
    try:
        rec = json.loads(raw)
    except UnicodeDecodeError:
        raise BadRecord("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise BadRecord(f"invalid JSON: {exc.msg} at column {exc.colno}") from None
    if type(rec) is not dict:
        raise BadRecord(f"expected a JSON object, got {show(rec)}")
    missing = [key for key in REQUIRED_KEYS if key not in rec]
    if missing:
        raise BadRecord(f"missing key {missing[0]!r}")
    return rec


def read_record(rec: dict[str, Any], line: int) -> tuple[Row, Extra]:
    """The canonical fields of one record: ``(arrival, in, out, hashes, id)`` and the optional
    ``(tenant, session, chat_id, parent_chat_id)``; the id is ``r<line>`` unless given."""
    row = (_timestamp(rec), _count(rec, "input_length"), _count(rec, "output_length"))
    hashes = _hash_ids(rec)
    if len(rec) == len(REQUIRED_KEYS):  # the common case: no optional keys to look at
        return (*row, hashes, f"r{line}"), _NO_EXTRA
    rid = _optional_label(rec, "request_id") or f"r{line}"
    extra = (
        _optional_label(rec, "tenant"),
        _optional_label(rec, "session", "session_id"),
        _optional_int(rec, "chat_id"),
        _optional_int(rec, "parent_chat_id"),
    )
    return (*row, hashes, rid), extra
