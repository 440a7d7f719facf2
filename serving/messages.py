"""Every message between kvcast processes on the block-transfer path, and its wire codec.

A frame is a 12-byte header ``>4sBBHI`` (magic ``KVCT``, version, type, flags = 0, body length)
then a struct-packed body; a :class:`BlockHeader` frame is followed by ``nbytes`` raw payload
bytes outside the body. Decoding is total: any bad input raises :class:`ProtocolError` only.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

MAGIC, VERSION = b"KVCT", 1
HEADER = struct.Struct(">4sBBHI")
HEADER_SIZE = HEADER.size
MAX_BODY, MAX_HASH_BYTES, MAX_U64 = 1 << 20, 64, (1 << 64) - 1

BlockHash = int | bytes
"""A block hash as engines publish it: an unsigned 64-bit int or up to 64 raw bytes."""


class ProtocolError(ValueError):
    """A frame or body that is not valid kvcast wire protocol."""


class MsgType(IntEnum):
    PULL_REQUEST, BLOCK_HEADER, DONE, ERROR = 1, 2, 3, 4


class ErrorCode(IntEnum):
    """BUSY: the source serves as many peers as it may; a later attempt may succeed."""

    BAD_REQUEST, UNAUTHORIZED, INTERNAL, BUSY = 1, 2, 3, 4


_LIMIT = {"E": 0xFFFF, "I": (1 << 32) - 1, "Q": MAX_U64, "h": MAX_U64}
_FMT = {"E": ">H", "I": ">I", "Q": ">Q"}


def _valid(kind: str, v: object) -> bool:
    if kind == "s":
        return isinstance(v, str) and len(v.encode("utf-8")) <= 0xFFFF
    if kind == "H":
        return isinstance(v, tuple) and all(_valid("h", h) for h in v)
    if kind == "h" and isinstance(v, bytes):
        return 1 <= len(v) <= MAX_HASH_BYTES
    if kind == "E" and not isinstance(v, ErrorCode):
        return False
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _LIMIT[kind]


class _Checked:
    __slots__ = ()

    def __post_init__(self) -> None:
        for kind, name in zip(_SCHEMA[type(self)][1], self.__slots__, strict=True):
            if not _valid(kind, getattr(self, name)):
                raise ValueError(f"{type(self).__name__}.{name}: bad value {getattr(self, name)!r}")


@dataclass(frozen=True, slots=True)
class PullRequest(_Checked):
    """Puller -> source: send these blocks of ``tenant``; ``token`` authenticates the puller."""

    command_id: str
    tenant: str
    block_hashes: tuple[BlockHash, ...]
    token: str = ""


@dataclass(frozen=True, slots=True)
class BlockHeader(_Checked):
    """Source -> puller: ``nbytes`` raw bytes of one block follow; ``checksum`` is xxh3-64."""

    block_hash: BlockHash
    tenant: str
    nbytes: int
    checksum: int


@dataclass(frozen=True, slots=True)
class Done(_Checked):
    """Source -> puller: the pull is finished; ``missing`` lists blocks the source lacks."""

    command_id: str
    blocks_sent: int
    missing: tuple[BlockHash, ...] = ()


@dataclass(frozen=True, slots=True)
class Error(_Checked):
    """Either side: the command failed; the connection closes after this frame."""

    code: ErrorCode
    command_id: str
    message: str


Message = PullRequest | BlockHeader | Done | Error
# Per message: its type tag and one field kind per field, in declaration order: s = utf-8
# string (u16 length), h = block hash, H = hash list (u32 count), I = u32, Q = u64, E = ErrorCode.
_SCHEMA: dict[type, tuple[MsgType, str]] = {
    PullRequest: (MsgType.PULL_REQUEST, "ssHs"),
    BlockHeader: (MsgType.BLOCK_HEADER, "hsQQ"),
    Done: (MsgType.DONE, "sIH"),
    Error: (MsgType.ERROR, "Ess"),
}
_BY_TYPE = {mtype: (cls, kinds) for cls, (mtype, kinds) in _SCHEMA.items()}


def _field(kind: str, value: Any) -> bytes:
    if kind == "s":
        raw = value.encode("utf-8")
        return struct.pack(">H", len(raw)) + raw
    if kind == "H":
        return struct.pack(">I", len(value)) + b"".join(_field("h", h) for h in value)
    if kind == "h" and isinstance(value, bytes):
        return struct.pack(">BB", 1, len(value)) + value
    return struct.pack(">BQ", 0, value) if kind == "h" else struct.pack(_FMT[kind], value)


def encode(msg: Message) -> bytes:
    """One complete frame (header + body) for ``msg``."""
    mtype, kinds = _SCHEMA[type(msg)]
    body = b"".join(_field(k, getattr(msg, f)) for k, f in zip(kinds, msg.__slots__, strict=True))
    if len(body) > MAX_BODY:
        raise ValueError(f"message body of {len(body)} bytes exceeds {MAX_BODY}")
    return HEADER.pack(MAGIC, VERSION, mtype, 0, len(body)) + body


def decode_header(data: bytes | memoryview) -> tuple[MsgType, int]:
    """Validate a frame header; return the message type and the body length."""
    if len(data) != HEADER_SIZE:
        raise ProtocolError(f"header must be {HEADER_SIZE} bytes, got {len(data)}")
    magic, version, mtype, flags, length = HEADER.unpack(data)
    if magic != MAGIC or version != VERSION or flags != 0:
        raise ProtocolError(f"bad header: magic {magic!r}, version {version}, flags {flags}")
    if length > MAX_BODY:
        raise ProtocolError(f"body length {length} exceeds {MAX_BODY}")
    if mtype not in _BY_TYPE:
        raise ProtocolError(f"unknown message type {mtype}")
    return MsgType(mtype), length


class _Reader:
    def __init__(self, data: bytes | memoryview) -> None:
        self.data, self.pos = memoryview(data), 0

    def take(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def raw(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ProtocolError("truncated body")
        self.pos += n
        return bytes(self.data[self.pos - n : self.pos])

    def hash(self) -> BlockHash:
        tag = self.take(">B")
        if tag not in (0, 1):
            raise ProtocolError(f"bad block-hash tag {tag}")
        return self.take(">Q") if tag == 0 else self.raw(self.take(">B"))

    def field(self, kind: str) -> object:
        if kind == "s":
            return self.raw(self.take(">H")).decode("utf-8")
        if kind == "h":
            return self.hash()
        if kind == "H":
            # Each hash takes >= 2 body bytes, so a huge count fails fast at the body's end.
            return tuple(self.hash() for _ in range(self.take(">I")))
        value = self.take(_FMT[kind])
        return ErrorCode(value) if kind == "E" else value


def decode_body(mtype: MsgType, body: bytes | memoryview) -> Message:
    """Decode the body of a frame whose header said ``mtype``; the whole body must be used."""
    cls, kinds = _BY_TYPE[mtype]
    reader = _Reader(body)
    try:
        msg = cls(*(reader.field(k) for k in kinds))
    except (struct.error, ValueError) as err:  # UnicodeDecodeError is a ValueError
        raise ProtocolError(f"bad {mtype.name} body: {err}") from None
    if reader.pos != len(reader.data):
        raise ProtocolError(f"{len(reader.data) - reader.pos} trailing bytes in {mtype.name}")
    return msg


def decode(frame: bytes | memoryview) -> Message:
    """Decode one complete frame produced by :func:`encode`."""
    view = memoryview(frame)
    mtype, length = decode_header(view[:HEADER_SIZE])
    if len(view) != HEADER_SIZE + length:
        raise ProtocolError(f"frame length {len(view)} != {HEADER_SIZE + length}")
    return decode_body(mtype, view[HEADER_SIZE:])
