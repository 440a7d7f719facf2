"""``FeatureState``: the one incremental feature state used by the simulator and the sidecar.

Feed it every event with :meth:`FeatureState.update` (any order within
``reorder_tolerance_ms``); at a decision tick ask :meth:`FeatureState.rows` for the feature
matrix of some blocks, in the order of :func:`kvcast.features.spec.build_spec`. Call ``rows(now)``
before feeding events later than ``now``: the rows see exactly the events with ``ts <= now``.

Cost: a request costs a few Python steps per *run* it touches (blocks so far always requested
together share one state, see :mod:`kvcast.features.online.blocks`) plus C-level work per block;
residency events are set operations; telemetry is O(1). A sweep every
``min(horizon, 500 x shortest half-life)`` ms of stream time adds amortised O(1). Memory is
bounded by the blocks and sessions seen within ``horizon_ms``, and by ``max_blocks`` blocks
and ``max_sessions`` sessions when caps are set (plus at most about twice the
keys each run saw within ``distinct_window_ms``), the telemetry within the longest window, and
what is resident. :meth:`FeatureState.rows` runs no Python step per row: C-level lookups, a
few numpy passes, and per home node a cached telemetry row (see
:mod:`kvcast.features.online.rows`).
Bad input is counted in :attr:`bad` (see :mod:`kvcast.features.counters`) and dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from kvcast.features.block_meta import tenant_code, whole_blocks
from kvcast.features.config import FeatureConfig
from kvcast.features.counters import BadInputCounters
from kvcast.features.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    Event,
    ReplicationDone,
    RequestArrived,
    TelemetrySample,
)
from kvcast.features.online.blocks import HASHES, LAST, POS0, REQ, SLOT, BlockTable
from kvcast.features.online.chain_codes import Cover, chain_blocks, distinct_blocks
from kvcast.features.online.codes import named
from kvcast.features.online.reorder import ReorderBuffer
from kvcast.features.online.residency import Residency
from kvcast.features.online.rows import assemble_rows
from kvcast.features.online.sessions import SessionTable, infer_session
from kvcast.features.online.telemetry import NodeTelemetry
from kvcast.features.spec import FeatureSpec, build_spec
from kvcast.features.validate import U64, canonical, check, unique_blocks

MAX_TENANT_CODES = 4096  # tenant codes cached (a crc32 each: recomputing is cheap)


class FeatureState:
    def __init__(
        self,
        cfg: FeatureConfig | None = None,
        max_blocks: int | None = None,
        max_sessions: int | None = None,
    ) -> None:
        """``max_blocks`` / ``max_sessions``: operational caps on tracked blocks and sessions
        (None: the horizon alone bounds memory). Over a cap the least recently requested are
        dropped (see :meth:`BlockTable.sweep`, :meth:`SessionTable.sweep`); the caps are not
        part of the feature spec, so rows of what is kept are unchanged, and what was dropped
        reads as never seen."""
        self.cfg = cfg = cfg if cfg is not None else FeatureConfig()
        self.spec: FeatureSpec = build_spec(cfg)
        self.bad = BadInputCounters()
        self.blocks = BlockTable(
            cfg.heat_half_lives_ms, cfg.distinct_window_ms, cfg.horizon_ms, max_blocks
        )
        self.sessions = SessionTable(cfg.session.ewma_alpha, cfg.horizon_ms, max_sessions)
        self.residency = Residency(cfg.nodes)
        self.nodes = [
            NodeTelemetry(cfg.queue_windows_ms, cfg.eviction_window_ms) for _ in range(cfg.nodes)
        ]
        self._tenants: dict[str, float] = {}  # a cache of tenant_code, cleared when full
        # the last request applied: its blocks (deduped: the request's own tuple when none
        # repeats) and the runs they were cut into (see :func:`chain_blocks`' covers)
        self.last_cover: tuple[tuple[int, ...], Cover] | None = None
        self._buffer = ReorderBuffer(self._apply, cfg.reorder_tolerance_ms, self.bad)
        self._handlers = {
            RequestArrived: self._on_request,
            BlockStored: self._on_stored,
            BlockRemoved: self._on_removed,
            AllBlocksCleared: self._on_cleared,
            TelemetrySample: self._on_telemetry,
            ReplicationDone: self._on_replication,
        }

    # -- events ---------------------------------------------------------------------------
    def update(self, ev: Event) -> None:
        """Consume one event; bad input is counted, never raised."""
        reason = check(ev, self.cfg.nodes)
        if reason is not None:
            self.bad.counts[reason] += 1
            return
        self._buffer.push(ev.ts_ms, canonical(ev))

    def update_many(self, events: Iterable[Event]) -> None:
        for ev in events:
            self.update(ev)

    def flush(self) -> None:
        """Apply every event still held for reordering (end of stream)."""
        self._buffer.flush()

    def _apply(self, ev: Event) -> None:
        self._handlers[type(ev)](ev)

    def _on_request(self, ev: RequestArrived) -> None:
        ts = ev.ts_ms
        blocks = self.blocks
        if ts >= blocks.next_sweep or blocks.over_cap() or self.sessions.over_cap():
            blocks.sweep(ts)
            self.sessions.sweep(ts)
        hashes, repeats = unique_blocks(ev.block_hashes)
        if repeats:
            self.bad.counts["duplicate_block_in_request"] += repeats
        cover = blocks.cover(ts, hashes)
        explicit = isinstance(ev.session, str)  # None, NaN or pd.NA: inferred, as offline
        key = ev.session if explicit else infer_session(blocks, ts, cover, hashes)
        if key is not None:
            self.sessions.observe(key, ts)
        code = self._tenants.get(ev.tenant)
        if code is None:
            if len(self._tenants) >= MAX_TENANT_CODES:  # tenant ids may be per user or API key
                self._tenants.clear()
            code = self._tenants[ev.tenant] = tenant_code(ev.tenant)
        rec = (ts, ev.node, key, ev.input_tokens, ev.public_blocks, code, float(explicit),
               len(hashes))  # fmt: skip
        blocks.touch(ts, cover, hashes, rec, key, code)
        self.last_cover = (hashes, cover)

    def _on_stored(self, ev: BlockStored) -> None:
        self.residency.store(ev.medium, ev.node, ev.block_hashes)

    def _on_removed(self, ev: BlockRemoved) -> None:
        self.residency.remove(ev.medium, ev.node, ev.block_hashes, self.bad)

    def _on_cleared(self, ev: AllBlocksCleared) -> None:
        self.residency.clear(ev.node)

    def _on_telemetry(self, ev: TelemetrySample) -> None:
        self.nodes[ev.node].add(ev, self.bad)

    def _on_replication(self, ev: ReplicationDone) -> None:
        if ev.ok:
            self.residency.store("GPU", ev.target, ev.block_hashes)

    # -- queries --------------------------------------------------------------------------
    def candidates(self, now_ms: float) -> list[int]:
        """Blocks requested within ``ticks.lookback_ms`` before ``now_ms`` and full in the
        last request that named them (:func:`whole_blocks`: a trailing partial block is
        never reused; the offline rule)."""
        self._buffer.commit(now_ms)
        k, lookback, code_of = self.blocks.k, self.cfg.ticks.lookback_ms, self.blocks.code_of
        size = self.cfg.block_tokens
        out: list[int] = []
        for r in self.blocks.runs.values():
            if r[k + LAST] + lookback > now_ms:
                hashes, rec = r[k + HASHES], r[k + REQ]
                full = whole_blocks(rec[3], rec[7], size) - r[k + POS0]
                if full < len(hashes):
                    hashes = hashes[: max(full, 0)]
                out += named(code_of, hashes, r[k + SLOT])
        return out

    def rows(self, now_ms: float, candidate_blocks: Iterable[int]) -> np.ndarray:
        """Feature matrix ``[n, len(spec)]`` for ``candidate_blocks`` at ``now_ms``."""
        self._buffer.commit(now_ms)
        hashes = list(candidate_blocks)
        if hashes and min(hashes) < 0:  # blocks are kept by their u64 id (see canonical)
            hashes = [h & U64 for h in hashes]
        return assemble_rows(self, now_ms, hashes)

    def refresh(self) -> int:
        """Pack the numbers of the runs changed since the last rows ahead of the next
        (:meth:`~kvcast.features.online.run_numbers.RunNumbers.refresh`: off the tick, when
        the caller is idle); the rows are the same either way. How many runs it packed."""
        return self.blocks.numbers.refresh(self.blocks.slot_runs, self.blocks.latest)

    def chain_rows(
        self,
        now_ms: float,
        chains: Sequence[tuple[int, ...]],
        covers: Sequence[Cover | None] | None = None,
    ) -> tuple[list[int], np.ndarray, np.ndarray]:
        """The distinct blocks of ``chains`` (first seen first), per block of the concatenated
        chains its index among them, and ``rows(now_ms, blocks)``: the same, read run by run
        (see :mod:`kvcast.features.online.chain_codes`; ``covers``: per chain, the cover of a
        request it is a prefix of, as :attr:`last_cover` had it, or None)."""
        self._buffer.commit(now_ms)
        found = chain_blocks(self.blocks, chains, covers)
        if found is None:
            blocks, where = distinct_blocks(chains)
            return blocks, where, self.rows(now_ms, blocks)
        return found.blocks, found.where, assemble_rows(self, now_ms, found.blocks, found.runs())

    @property
    def counters(self) -> dict[str, int]:
        return self.bad.as_dict()

    def memory(self) -> dict[str, int]:
        """Sizes of everything that grows with the stream (the bounded-memory check)."""
        return {
            "blocks": len(self.blocks),
            "runs": len(self.blocks.runs),
            "sessions": len(self.sessions),
            "held_for_reorder": len(self._buffer),
            "resident": len(self.residency),
            "tenant_codes": len(self._tenants),
            "shed_blocks": self.blocks.shed_blocks,
            "shed_sessions": self.sessions.shed,
        }
