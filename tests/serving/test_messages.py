"""The transfer-path wire protocol: every message round-trips; every bad input is one error."""

from __future__ import annotations

import contextlib
import struct

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from kvcast.serving.messages import (
    HEADER,
    HEADER_SIZE,
    MAGIC,
    MAX_BODY,
    VERSION,
    BlockHeader,
    Done,
    Error,
    ErrorCode,
    MsgType,
    ProtocolError,
    PullRequest,
    decode,
    decode_body,
    decode_header,
    encode,
)

U64 = (1 << 64) - 1
hashes = st.one_of(st.integers(0, U64), st.binary(min_size=1, max_size=64))
text = st.text(max_size=40)
messages = st.one_of(
    st.builds(PullRequest, text, text, st.lists(hashes, max_size=8).map(tuple), text),
    st.builds(BlockHeader, hashes, text, st.integers(0, U64), st.integers(0, U64)),
    st.builds(Done, text, st.integers(0, (1 << 32) - 1), st.lists(hashes, max_size=8).map(tuple)),
    st.builds(Error, st.sampled_from(list(ErrorCode)), text, text),
)

EXAMPLES = [
    PullRequest("cmd-1", "tenant-a", (1, U64, b"\x00" * 32), "s3cret"),
    PullRequest("", "", ()),
    BlockHeader(0xDEADBEEF, "tenant-a", 4 << 20, U64),
    BlockHeader(b"sha256-bytes-hash", "t\u00e9nant", 0, 0),
    Done("cmd-1", 3, (7, b"x")),
    Done("cmd-2", 0),
    Error(ErrorCode.UNAUTHORIZED, "cmd-1", "bad token"),
]


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: type(m).__name__)
def test_every_message_type_round_trips(msg) -> None:
    frame = encode(msg)
    assert decode(frame) == msg
    mtype, length = decode_header(frame[:HEADER_SIZE])
    assert length == len(frame) - HEADER_SIZE
    assert decode_body(mtype, frame[HEADER_SIZE:]) == msg


def test_every_message_type_is_covered() -> None:
    assert {type(m) for m in EXAMPLES} == {PullRequest, BlockHeader, Done, Error}
    assert len(MsgType) == 4


@settings(max_examples=150, deadline=None)
@given(messages)
def test_generated_messages_round_trip(msg) -> None:
    assert decode(encode(msg)) == msg


def decodes_or_refuses(frame: bytes) -> None:
    """Decoding ``frame`` yields a message or raises ProtocolError, and nothing else."""
    with contextlib.suppress(ProtocolError):
        assert isinstance(decode(frame), PullRequest | BlockHeader | Done | Error)


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 4), st.binary(max_size=200))
def test_random_bytes_decode_to_a_message_or_protocol_error_only(mtype: int, body: bytes) -> None:
    decodes_or_refuses(body)  # no valid header
    decodes_or_refuses(HEADER.pack(MAGIC, VERSION, mtype, 0, len(body)) + body)  # bad body


@settings(max_examples=150, deadline=None)
@given(messages, st.data())
def test_mutated_frames_decode_or_raise_protocol_error(msg, data) -> None:
    frame = bytearray(encode(msg))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(frame) - 1))
        frame[i] = data.draw(st.integers(0, 255))
    decodes_or_refuses(bytes(frame))


def test_every_truncation_of_a_frame_is_a_protocol_error() -> None:
    frame = encode(EXAMPLES[0])
    for n in range(len(frame)):
        with pytest.raises(ProtocolError):
            decode(frame[:n])


@pytest.mark.parametrize(
    "header, reason",
    [
        (HEADER.pack(b"XXXX", VERSION, 1, 0, 0), "magic"),
        (HEADER.pack(MAGIC, VERSION + 1, 1, 0, 0), "version"),
        (HEADER.pack(MAGIC, VERSION, 1, 7, 0), "flags"),
        (HEADER.pack(MAGIC, VERSION, 99, 0, 0), "unknown message type"),
        (HEADER.pack(MAGIC, VERSION, 1, 0, MAX_BODY + 1), "exceeds"),
    ],
)
def test_bad_headers_are_refused_with_a_reason(header: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        decode_header(header)


def test_trailing_bytes_and_bad_fields_are_refused() -> None:
    frame = encode(Done("c", 1))
    body = frame[HEADER_SIZE:] + b"\x00"
    with pytest.raises(ProtocolError, match="trailing"):
        decode(HEADER.pack(MAGIC, VERSION, MsgType.DONE, 0, len(body)) + body)
    bad_tag = struct.pack(">B", 9) + b"\x00" * 8
    with pytest.raises(ProtocolError, match="tag"):
        decode_body(MsgType.BLOCK_HEADER, bad_tag + frame[HEADER_SIZE:])
    bad_code = struct.pack(">H", 999) + b"\x00\x00" * 2
    with pytest.raises(ProtocolError):
        decode_body(MsgType.ERROR, bad_code)
    bad_utf8 = struct.pack(">H", 2) + b"\xff\xfe" + struct.pack(">I", 0)
    with pytest.raises(ProtocolError):
        decode_body(MsgType.DONE, bad_utf8)


@pytest.mark.parametrize(
    "make",
    [
        lambda: PullRequest("c", "t", (-1,)),
        lambda: PullRequest("c", "t", (1 << 64,)),
        lambda: PullRequest("c", "t", (b"",)),
        lambda: PullRequest("c", "t", (True,)),
        lambda: BlockHeader(1, "t", -1, 0),
        lambda: Done("c", 1 << 32),
        lambda: Error(3, "c", "not an ErrorCode"),  # type: ignore[arg-type]
        lambda: PullRequest("c" * 70000, "t", ()),
    ],
)
def test_invalid_messages_cannot_be_built(make) -> None:
    with pytest.raises(ValueError):
        make()
