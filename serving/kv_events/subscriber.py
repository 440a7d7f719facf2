"""Subscribe to one engine's vLLM KV events over ZMQ and turn them into kvcast events.

One subscriber per engine endpoint (vLLM offsets the port per data-parallel rank), stamped with
that engine's ``node``. Each message must be ``(topic, seq, payload)``; sequence numbers are
tracked per topic: a jump forward is a gap, recovered through the replay socket when one is
configured; a jump back is a publisher restart, after which (by default) an
``AllBlocksCleared`` is emitted first, since a new engine process starts with an empty prefix
cache, and the new process's batches that were missed are replayed too. Nothing raised for bad
input: malformed messages and undecodable payloads are counted. Sync and blocking by design;
use one thread per subscriber and call :meth:`close` from it (ZMQ sockets are not thread-safe).

Catch-up (``catch_up=True``, with a replay socket): a subscriber that joins a running engine
(the sidecar restarted, or started after it) first asks the replay socket for every batch it
still buffers, so the engine's recent history (which blocks it stored and removed) is not
lost; the first live message from a publisher then only recovers what came after that, and is
skipped when the catch-up already delivered it. ZMQ's slow joiner (what a PUB sends before
the SUB is connected is dropped) is recovered the same way.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

import zmq

from kvcast.features.events import AllBlocksCleared

from .decode import DecodedBatch, KvEventDecodeError, decode_batch
from .replay import ReplayClient
from .sequence import SeqStep, SeqTracker, SeqVerdict
from .wire import unpack_seq

MAX_SEQ = (1 << 63) - 1  # vLLM's sequence numbers are signed 64-bit


@dataclass(slots=True)
class KvSubscriberCounters:
    received: int = 0  # multipart messages read from the SUB socket, malformed ones included
    decoded_events: int = 0  # typed events produced (live and replayed)
    gaps: int = 0  # forward jumps in a publisher's sequence
    missed_batches: int = 0  # sequence numbers skipped by gaps and restarts
    restarts: int = 0  # sequence went back: a new publisher process
    replayed: int = 0  # missed batches recovered through the replay socket
    replay_failures: int = 0  # replay requests that timed out
    decode_errors: int = 0  # payloads that were not a KVEventBatch
    malformed: int = 0  # messages without exactly (topic, 8-byte seq, payload)
    skipped_events: int = 0  # events of unknown type or medium
    caught_up: int = 0  # batches of the engine's history replayed on joining it


class KvEventSubscriber:
    """SUB socket connected to ``endpoint``, filtered on ``topic`` ("" receives every topic)."""

    def __init__(
        self,
        endpoint: str,
        *,
        node: int,
        topic: str = "",
        replay_endpoint: str | None = None,
        replay_timeout_ms: int = 500,
        clear_on_restart: bool = True,
        catch_up: bool = False,
        hwm: int = 100_000,
        max_messages_per_poll: int = 1_000,
        context: zmq.Context | None = None,
    ) -> None:
        self.node = node
        self.clear_on_restart = clear_on_restart
        self.max_messages_per_poll = max_messages_per_poll
        ctx = context or zmq.Context.instance()
        self._sub = ctx.socket(zmq.SUB)
        self._sub.setsockopt(zmq.LINGER, 0)
        self._sub.set_hwm(hwm)
        self._sub.setsockopt(zmq.SUBSCRIBE, topic.encode("utf-8"))
        self._sub.connect(endpoint)
        self._replay = (
            ReplayClient(replay_endpoint, context=ctx, timeout_ms=replay_timeout_ms)
            if replay_endpoint is not None
            else None
        )
        self._seqs = SeqTracker()
        self._counters = KvSubscriberCounters()
        self._last_ts_ms: float | None = None
        self._catch_up_enabled = catch_up and self._replay is not None
        self._catch_up_due = self._catch_up_enabled
        self._caught_up_to: int | None = None  # last seq the catch-up delivered
        self._caught: dict[int, bytes] = {}  # seq -> digest of the payload the catch-up gave

    @property
    def counters(self) -> KvSubscriberCounters:
        """A copy of the counters (safe to read from another thread)."""
        return replace(self._counters)

    def poll(self, timeout_ms: int) -> list[DecodedBatch]:
        """Wait up to ``timeout_ms`` for a message, then drain what is queued, in order."""
        out: list[DecodedBatch] = []
        if self._catch_up_due:
            self._catch_up_due = False
            out += self._catch_up(0, None)
            if out:
                self._last_ts_ms = out[-1].ts_ms
        if not self._sub.poll(timeout_ms, zmq.POLLIN):
            return out
        for _ in range(self.max_messages_per_poll):
            try:
                frames = self._sub.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            self._handle(frames, out)
        return out

    def close(self) -> None:
        self._sub.close(linger=0)
        if self._replay is not None:
            self._replay.close()

    def __enter__(self) -> KvEventSubscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _handle(self, frames: list[bytes], out: list[DecodedBatch]) -> None:
        c = self._counters
        c.received += 1
        seq = unpack_seq(frames[1]) if len(frames) == 3 else None
        if seq is None:
            c.malformed += 1
            return
        step = self._seqs.observe(frames[0], seq)
        if self._catch_up_enabled:
            step = self._after_catch_up(step, seq, frames[2], out)
            if step is None:
                return  # the catch-up already delivered this batch
        current = self._decode(frames[2])
        if step.verdict is SeqVerdict.GAP:
            c.gaps += 1
            c.missed_batches += step.missing
        elif step.verdict is SeqVerdict.RESTART:
            c.restarts += 1
            c.missed_batches += step.missing
            if self.clear_on_restart:
                out.append(self._cleared(current))
        if step.missing:
            out.extend(self._recover(step))
        if current is not None:
            out.append(current)
        if out:
            self._last_ts_ms = out[-1].ts_ms

    def _after_catch_up(
        self, step: SeqStep, seq: int, payload: bytes, out: list[DecodedBatch]
    ) -> SeqStep | None:
        """A live batch seen against what the catch-up delivered: None if it is one of those
        (the same number and bytes), else the step to take. A batch under a caught-up number
        with other bytes is a new engine (restarted before its first live batch reached us);
        a gap never recovers what the catch-up delivered."""
        done = self._caught_up_to
        if step.verdict is SeqVerdict.RESTART:
            self._forget_catch_up()  # a new engine: its numbers mean new batches
        elif done is not None and seq <= done:
            if self._caught.get(seq) == _digest(payload):
                return None
            self._forget_catch_up()
            return SeqStep(SeqVerdict.RESTART, 0, seq)
        elif step.verdict is SeqVerdict.FIRST:
            out.extend(self._catch_up(0 if done is None else done + 1, seq))
        elif done is not None:
            if step.verdict is SeqVerdict.GAP and step.missing_from <= done:
                step = SeqStep(SeqVerdict.GAP, done + 1, step.missing_to)
            self._forget_catch_up()  # live past it: later numbers are all new
        return step

    def _forget_catch_up(self) -> None:
        self._caught_up_to = None
        self._caught.clear()

    def _catch_up(self, start: int, stop: int | None) -> list[DecodedBatch]:
        """The engine's buffered batches with ``start <= seq < stop`` (None: all of them)."""
        if self._replay is None or (stop is not None and stop <= start):
            return []
        got = self._replay.fetch(start, stop if stop is not None else MAX_SEQ)
        if got is None:
            self._counters.replay_failures += 1
            return []
        if got:
            self._caught_up_to = max(got[-1][0], self._caught_up_to or 0)
            self._caught.update((seq, _digest(payload)) for seq, payload in got)
        self._counters.caught_up += len(got)
        return [b for b in (self._decode(payload) for _, payload in got) if b is not None]

    def _recover(self, step: SeqStep) -> list[DecodedBatch]:
        if self._replay is None:
            return []
        got = self._replay.fetch(step.missing_from, step.missing_to)
        if got is None:
            self._counters.replay_failures += 1
            return []
        self._counters.replayed += len(got)
        return [b for b in (self._decode(payload) for _, payload in got) if b is not None]

    def _decode(self, payload: bytes) -> DecodedBatch | None:
        try:
            batch = decode_batch(payload, node=self.node)
        except KvEventDecodeError:
            self._counters.decode_errors += 1
            return None
        self._counters.decoded_events += len(batch.events)
        self._counters.skipped_events += batch.unknown_types + batch.unknown_media
        return batch

    def _cleared(self, current: DecodedBatch | None) -> DecodedBatch:
        """The synthetic batch that drops the restarted engine's old blocks (not counted)."""
        ts_ms = self._last_ts_ms
        if ts_ms is None:
            ts_ms = current.ts_ms if current is not None else 0.0
        return DecodedBatch(ts_ms, None, (AllBlocksCleared(ts_ms=ts_ms, node=self.node),))


def _digest(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=16).digest()
