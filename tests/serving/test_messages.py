"""The transfer-path wire protocol: every message round-trips; every bad input is one error; a
Hello's length is bounded from its header; a frame of another version is told apart, and a
version-1 peer can be refused in a frame it reads, in the one message both sides use; a
Hello's token never shows in its repr or an error, nor more than a prefix of another value."""

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
    MAX_HELLO_BODY,
    VERSION,
    BlockHeader,
    Done,
    Error,
    ErrorCode,
    Hello,
    MsgType,
    ProtocolError,
    PullRequest,
    VersionMismatch,
    decode,
    decode_body,
    decode_header,
    encode,
    version_refusal,
)

U64 = (1 << 64) - 1
hashes = st.one_of(st.integers(0, U64), st.binary(min_size=1, max_size=64))
text = st.text(max_size=40)
messages = st.one_of(
    st.builds(Hello, text, text),
    st.builds(PullRequest, text, text, st.lists(hashes, max_size=8).map(tuple)),
    st.builds(BlockHeader, hashes, text, st.integers(0, U64), st.integers(0, U64)),
    st.builds(Done, text, st.integers(0, (1 << 32) - 1), st.lists(hashes, max_size=8).map(tuple)),
    st.builds(Error, st.sampled_from(list(ErrorCode)), text, text),
)

EXAMPLES = [
    Hello("agent-1", "s3cret"),
    Hello("", ""),
    PullRequest("cmd-1", "tenant-a", (1, U64, b"\x00" * 32)),
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
    assert {type(m) for m in EXAMPLES} == {Hello, PullRequest, BlockHeader, Done, Error}
    assert len(MsgType) == 5


@settings(max_examples=150, deadline=None)
@given(messages)
def test_generated_messages_round_trip(msg) -> None:
    assert decode(encode(msg)) == msg


def decodes_or_refuses(frame: bytes) -> None:
    """Decoding ``frame`` yields a message or raises ProtocolError, and nothing else."""
    with contextlib.suppress(ProtocolError):
        assert isinstance(decode(frame), Hello | PullRequest | BlockHeader | Done | Error)


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 5), st.binary(max_size=200))
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
    frame = encode(EXAMPLES[2])
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
        lambda: Hello("n", "x" * MAX_HELLO_BODY),  # fits a string field, not a Hello
    ],
)
def test_invalid_messages_cannot_be_built(make) -> None:
    with pytest.raises(ValueError):
        make()


def test_the_version_2_frames_are_exactly_these_bytes() -> None:
    """The wire layout, pinned: a Hello (type 5: node id, token) opens a connection, and a
    PullRequest no longer carries a token after its hashes."""
    hello = "4b564354 02 05 0000 00000008 | 0001 6e | 0003 746f6b"
    assert encode(Hello("n", "tok")) == bytes.fromhex(hello.replace("|", ""))
    request = "4b564354 02 01 0000 00000013 | 0001 63 | 0001 74 | 00000001 00 0000000000000001"
    assert encode(PullRequest("c", "t", (1,))) == bytes.fromhex(request.replace("|", ""))


def test_a_hello_header_announcing_more_than_the_hello_limit_is_refused_from_the_header() -> None:
    hello = MsgType.HELLO
    assert decode_header(HEADER.pack(MAGIC, VERSION, hello, 0, MAX_HELLO_BODY))[1] == 4096
    with pytest.raises(ProtocolError, match=f"HELLO body length {MAX_HELLO_BODY + 1} exceeds"):
        decode_header(HEADER.pack(MAGIC, VERSION, hello, 0, MAX_HELLO_BODY + 1))
    with pytest.raises(ProtocolError, match="exceeds"):
        decode_header(HEADER.pack(MAGIC, VERSION, hello, 0, MAX_BODY))  # fine for others


@pytest.mark.parametrize("version", [0, 1, VERSION + 1, 255])
def test_a_header_of_another_version_raises_version_mismatch_naming_it(version: int) -> None:
    # whatever the rest says: another version may lay it out differently
    header = HEADER.pack(MAGIC, version, 99, 7, MAX_BODY + 1)
    with pytest.raises(VersionMismatch) as refused:
        decode_header(header)
    assert refused.value.version == version and isinstance(refused.value, ProtocolError)


def test_a_version_1_pull_request_is_a_version_mismatch() -> None:
    """What a version-1 puller sends: its PullRequest with the token last."""
    body = encode(PullRequest("c", "t", (1,)))[HEADER_SIZE:] + b"\x00\x03tok"
    with pytest.raises(VersionMismatch):
        decode(HEADER.pack(MAGIC, 1, MsgType.PULL_REQUEST, 0, len(body)) + body)


def test_an_error_encoded_for_version_1_is_the_frame_a_version_1_peer_reads() -> None:
    frame = encode(Error(ErrorCode.BAD_REQUEST, "c", "no"), version=1)
    # version 1's Error: header version 1, type 4, then code u16, command id, message
    v1_error = "4b564354 01 04 0000 00000009 | 0001 | 0001 63 | 0002 6e6f"
    assert frame == bytes.fromhex(v1_error.replace("|", ""))


@pytest.mark.parametrize(
    "msg, version",
    [(PullRequest("c", "t", ()), 1), (Hello("n", "t"), 1), (Error(ErrorCode.BUSY, "", ""), 3)],
)
def test_only_an_error_may_be_encoded_for_another_version(msg, version: int) -> None:
    with pytest.raises(ValueError, match="version"):
        encode(msg, version=version)


def test_a_hellos_token_never_shows_in_its_repr_or_in_an_error() -> None:
    hello = Hello("agent-1", "s3cret")
    assert "s3cret" not in repr(hello) and "agent-1" in repr(hello)
    assert "s3cret" not in str(hello)
    for token in ("T" * 70000, "é" * 40000, "T" * MAX_HELLO_BODY):  # too long: a field, a Hello
        with pytest.raises(ValueError) as refused:
            Hello("n", token)
        assert token[:4] not in str(refused.value), str(refused.value)[:200]
    with pytest.raises(ValueError, match=r"Hello.token: bad value <a str of length 70000, not"):
        Hello("n", "T" * 70000)
    with pytest.raises(ValueError, match="not shown"):
        Hello("n", b"s3cret")  # type: ignore[arg-type]


def test_a_bad_value_shows_in_an_error_as_a_short_prefix_at_most() -> None:
    for make, prefix in [
        (lambda: PullRequest("c" * 70000, "t", ()), "'ccc"),
        (lambda: PullRequest("c", "t", (1,) * 100_000 + (-1,)), "(1, 1"),
        (lambda: Hello("n" * 70000, ""), "'nnn"),
    ]:
        with pytest.raises(ValueError) as refused:
            make()
        message = str(refused.value)
        assert len(message) < 120 and prefix in message, message


@pytest.mark.parametrize(
    "source, puller, says",
    [
        (2, 1, "the source speaks kvcast transfer protocol version 2, the puller version 1: "
               "upgrade the puller"),
        (1, 2, "the source speaks kvcast transfer protocol version 1, the puller version 2: "
               "upgrade the source"),
        (2, 3, "the source speaks kvcast transfer protocol version 2, the puller version 3: "
               "upgrade the source"),
    ],
)  # fmt: skip
def test_a_version_refusal_names_both_versions_and_the_older_side_to_upgrade(
    source: int, puller: int, says: str
) -> None:
    assert version_refusal(source, puller) == says
