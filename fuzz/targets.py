"""Fuzz targets: untrusted bytes into a decoder, with the one exception each may raise.

Every target takes bytes and either returns or raises its documented error type; anything else
(another exception, a hang) is a crash. Seeds are valid encodings, so that mutations explore
the decoder's deep paths and not only its first length check.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from kvcast.features.events import AllBlocksCleared, BlockRemoved, BlockStored
from kvcast.serving import messages as msg
from kvcast.serving.kv_events import KvEventDecodeError, decode_batch, encode_batch


@dataclass(frozen=True)
class Target:
    name: str
    run: Callable[[bytes], object]
    expected: type[Exception]
    seeds: Callable[[random.Random], list[bytes]]


def _kv_seeds(rng: random.Random) -> list[bytes]:
    out = []
    for encoding in ("array", "map"):
        for hash_format in ("int", "bytes"):
            events = [
                BlockStored(0.0, 0, tuple(rng.getrandbits(64) for _ in range(3)), None, 16),
                BlockRemoved(0.0, 0, (rng.getrandbits(64),)),
                AllBlocksCleared(0.0, 0),
            ]
            out.append(
                encode_batch(events, ts_ms=1000.0, encoding=encoding, hash_format=hash_format)
            )  # type: ignore[arg-type]
    return out


def _frame_seeds(rng: random.Random) -> list[bytes]:
    """One frame of every message type (a connection's Hello first), and a version-1 Error (a
    refusal a source sends a puller of that version) for the version check's path."""
    error = msg.Error(code=msg.ErrorCode.BAD_REQUEST, command_id="c5", message="no")
    return [
        msg.encode(msg.Hello(node_id=f"n{rng.getrandbits(16)}", token="secret")),
        msg.encode(
            msg.PullRequest(
                command_id=f"c{rng.getrandbits(32)}",
                tenant="t",
                block_hashes=(1, 2, b"\x01" * 32),
            )
        ),
        msg.encode(msg.BlockHeader(block_hash=7, tenant="t", nbytes=4096, checksum=99)),
        msg.encode(msg.Done(command_id="c5", blocks_sent=2, missing=(3,))),
        msg.encode(error),
        msg.encode(error, version=1),
    ]


TARGETS: dict[str, Target] = {
    "kv_events": Target(
        "kv_events", lambda b: decode_batch(b, node=0), KvEventDecodeError, _kv_seeds
    ),
    "agent_frames": Target("agent_frames", msg.decode, msg.ProtocolError, _frame_seeds),
}
