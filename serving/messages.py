"""Every message between kvcast processes on the block-transfer path, and its wire codec.

A frame is a 12-byte header ``>4sBBHI`` (magic ``KVCT``, version, type, flags = 0, body length)
then a struct-packed body; a :class:`BlockHeader` frame is followed by ``nbytes`` raw payload
bytes outside the body. Decoding is total: any bad input raises :class:`ProtocolError` only.

Protocol version 2: a connection opens with the puller's :class:`Hello` (its token), whose body
is at most :data:`MAX_HELLO_BODY` bytes, a limit :func:`decode_header` enforces from the header
alone; a source takes at most ``HEADER_SIZE + MAX_HELLO_BODY`` bytes from the socket of a peer
it has not authenticated (``serving/agent/tcp_server.py``); a :class:`PullRequest` (which
carried the token last in version 1) follows. A frame of another version raises
:class:`VersionMismatch` (a :class:`ProtocolError`) at its header, and either side says why in
:func:`version_refusal`'s words. An :class:`Error` frame reads the same in versions 1 and 2, so
that a source can refuse a version-1 puller in words that puller decodes (:func:`encode` with
``version=1``).

A message's ``repr`` and the errors its checks raise never show a secret field (the Hello's
token), and show at most a short prefix of any other long value.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field, fields
from enum import IntEnum
from typing import Any

MAGIC, VERSION = b"KVCT", 2
HEADER = struct.Struct(">4sBBHI")
HEADER_SIZE = HEADER.size
MAX_BODY, MAX_HASH_BYTES, MAX_U64 = 1 << 20, 64, (1 << 64) - 1
MAX_HELLO_BODY = 4 << 10  # a Hello's body: with the header, all a source holds of a peer
# before it has checked its token
ERROR_VERSIONS = frozenset({1, 2})  # versions whose Error frame is this version's

BlockHash = int | bytes
"""A block hash as engines publish it: an unsigned 64-bit int or up to 64 raw bytes."""


class ProtocolError(ValueError):
    """A frame or body that is not valid kvcast wire protocol."""


class VersionMismatch(ProtocolError):
    """A frame of kvcast protocol ``version``, not this module's :data:`VERSION`."""

    def __init__(self, version: int) -> None:
        super().__init__(f"frame of protocol version {version}; this side speaks {VERSION}")
        self.version = version


def version_refusal(source: int, puller: int) -> str:
    """Why a pull between a source speaking protocol version ``source`` and a puller speaking
    ``puller`` is refused, naming the side to upgrade (the older one): what a source tells
    (and logs of) a puller of another version, and what a puller reports of such a source."""
    older = "puller" if puller < source else "source"
    return (
        f"the source speaks kvcast transfer protocol version {source}, the puller version "
        f"{puller}: upgrade the {older}"
    )


class MsgType(IntEnum):
    PULL_REQUEST, BLOCK_HEADER, DONE, ERROR, HELLO = 1, 2, 3, 4, 5


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


_SHOWN_CHARS = 32  # of a bad value, at most this much of its repr goes into an error


def _shown(value: object, secret: bool) -> str:
    """``value`` as an error may show it: a secret by its type and size alone, another value by
    its repr, cut to a short prefix."""
    size = f" of length {len(value)}" if isinstance(value, str | bytes | tuple) else ""
    if secret:
        return f"<a {type(value).__name__}{size}, not shown>"
    if len(text := repr(value)) <= _SHOWN_CHARS:
        return text
    return f"{text[:_SHOWN_CHARS]}... (a {type(value).__name__}{size})"


class _Checked:
    """Checks each field against the message's schema. A field declared ``repr=False`` is a
    secret: an error names it, never shows its value."""

    __slots__ = ()

    def __post_init__(self) -> None:
        kinds = _SCHEMA[type(self)][1]
        for kind, spec in zip(kinds, fields(self), strict=True):  # type: ignore[arg-type]
            if not _valid(kind, value := getattr(self, spec.name)):
                shown = _shown(value, secret=not spec.repr)
                raise ValueError(f"{type(self).__name__}.{spec.name}: bad value {shown}")


@dataclass(frozen=True, slots=True)
class Hello(_Checked):
    """Puller -> source, the connection's first frame: ``token`` authenticates the puller
    (empty: none); ``node_id`` names it in the source's logs (a claim, not authenticated).
    Its body is at most :data:`MAX_HELLO_BODY` bytes. The token is kept out of its ``repr``
    and of the errors its checks raise."""

    node_id: str
    token: str = field(repr=False)

    def __post_init__(self) -> None:
        _Checked.__post_init__(self)
        if (n := len(_body(self))) > MAX_HELLO_BODY:
            raise ValueError(f"Hello body of {n} bytes exceeds {MAX_HELLO_BODY}")


@dataclass(frozen=True, slots=True)
class PullRequest(_Checked):
    """Puller -> source, after :class:`Hello`: send these blocks of ``tenant``."""

    command_id: str
    tenant: str
    block_hashes: tuple[BlockHash, ...]


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


Message = Hello | PullRequest | BlockHeader | Done | Error
# Per message: its type tag and one field kind per field, in declaration order: s = utf-8
# string (u16 length), h = block hash, H = hash list (u32 count), I = u32, Q = u64, E = ErrorCode.
_SCHEMA: dict[type, tuple[MsgType, str]] = {
    Hello: (MsgType.HELLO, "ss"),
    PullRequest: (MsgType.PULL_REQUEST, "ssH"),
    BlockHeader: (MsgType.BLOCK_HEADER, "hsQQ"),
    Done: (MsgType.DONE, "sIH"),
    Error: (MsgType.ERROR, "Ess"),
}
_BY_TYPE = {mtype: (cls, kinds) for cls, (mtype, kinds) in _SCHEMA.items()}
_MAX_BODY_OF = {MsgType.HELLO: MAX_HELLO_BODY}  # other types: MAX_BODY


def _field(kind: str, value: Any) -> bytes:
    if kind == "s":
        raw = value.encode("utf-8")
        return struct.pack(">H", len(raw)) + raw
    if kind == "H":
        return struct.pack(">I", len(value)) + b"".join(_field("h", h) for h in value)
    if kind == "h" and isinstance(value, bytes):
        return struct.pack(">BB", 1, len(value)) + value
    return struct.pack(">BQ", 0, value) if kind == "h" else struct.pack(_FMT[kind], value)


def _body(msg: Message) -> bytes:
    kinds = _SCHEMA[type(msg)][1]
    return b"".join(_field(k, getattr(msg, f)) for k, f in zip(kinds, msg.__slots__, strict=True))


def encode(msg: Message, version: int = VERSION) -> bytes:
    """One complete frame (header + body) for ``msg``. ``version``: another protocol version
    only for an :class:`Error`, and only one of :data:`ERROR_VERSIONS` (a refusal that a peer
    of that version can read)."""
    if version != VERSION and not (isinstance(msg, Error) and version in ERROR_VERSIONS):
        raise ValueError(f"cannot encode a {type(msg).__name__} for protocol version {version}")
    mtype = _SCHEMA[type(msg)][0]
    body = _body(msg)
    if len(body) > (limit := _MAX_BODY_OF.get(mtype, MAX_BODY)):
        raise ValueError(f"message body of {len(body)} bytes exceeds {limit}")
    return HEADER.pack(MAGIC, version, mtype, 0, len(body)) + body


def decode_header(data: bytes | memoryview) -> tuple[MsgType, int]:
    """Validate a frame header; return the message type and the body length (within the
    type's limit: :data:`MAX_HELLO_BODY` for a Hello, else :data:`MAX_BODY`). A header of
    another protocol version raises :class:`VersionMismatch`."""
    if len(data) != HEADER_SIZE:
        raise ProtocolError(f"header must be {HEADER_SIZE} bytes, got {len(data)}")
    magic, version, mtype, flags, length = HEADER.unpack(data)
    if magic != MAGIC:
        raise ProtocolError(f"bad header: magic {magic!r}")
    if version != VERSION:
        raise VersionMismatch(version)
    if flags != 0:
        raise ProtocolError(f"bad header: flags {flags}")
    if mtype not in _BY_TYPE:
        raise ProtocolError(f"unknown message type {mtype}")
    if length > (limit := _MAX_BODY_OF.get(mtype, MAX_BODY)):
        raise ProtocolError(f"{MsgType(mtype).name} body length {length} exceeds {limit}")
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
