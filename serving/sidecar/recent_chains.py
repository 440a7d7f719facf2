"""The decider's candidates: prefix chains of the requests the router sent recently.

As in the simulator's predictive policies (:mod:`kvcast.simulator.predictive`): the chains of
the requests seen within ``lookback_ms``, newest first, one entry per (tenant, chain), at most
``limit`` of them. A chain is the request's *full* blocks: a last block that the request's
token count shows to be partial is left out (it is never reused). Memory is bounded by
``max_kept`` distinct chains, the oldest forgotten first. Each chain keeps the cover of its
request in the feature state when the consumer had it (the tick reads the chain by it, see
:mod:`kvcast.features.online.chain_codes`).
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import islice
from operator import itemgetter

import numpy as np

from kvcast.features.block_meta import whole_blocks
from kvcast.features.events import RequestArrived
from kvcast.features.online.chain_codes import Cover
from kvcast.features.validate import unique_blocks
from kvcast.predictor.cluster_view import ChainCandidates

Key = tuple[str, tuple[int, ...]]


def full_blocks(hashes: tuple[int, ...], input_tokens: int, block_tokens: int) -> tuple[int, ...]:
    """The blocks of a request that are full (:func:`whole_blocks`)."""
    return hashes[: whole_blocks(input_tokens, len(hashes), block_tokens)]


class RecentChains:
    def __init__(self, lookback_ms: float, limit: int, block_tokens: int, max_kept: int = 0):
        self.lookback_ms, self.limit, self.block_tokens = lookback_ms, limit, block_tokens
        self.max_kept = max_kept or 64 * limit
        self._seen: OrderedDict[Key, tuple[float, int, Cover | None]] = OrderedDict()

    def add(self, ev: RequestArrived, cover: Cover | None = None) -> None:
        """Note the request's chain; ``cover``: the runs the feature state cut the request's
        blocks into (kept with the chain for the tick's reading of it: given only for the
        request's own tuple of blocks, which then has no repeat), or None. Blocks a request
        names twice count once, before its full ones are taken (as the feature state, and the
        offline rows, take them)."""
        hashes = ev.block_hashes if cover is not None else unique_blocks(ev.block_hashes)[0]
        chain = full_blocks(hashes, ev.input_tokens, self.block_tokens)
        if not chain:
            return
        key = (ev.tenant, chain)
        seen = self._seen
        old = seen.get(key)
        if old is not None:
            seen.move_to_end(key)
            if cover is None:  # the same blocks: the earlier request's cover is theirs too
                cover = old[2]
        seen[key] = (ev.ts_ms, ev.public_blocks, cover)
        if len(seen) > self.max_kept:
            seen.popitem(last=False)

    def candidates(self, now_ms: float, default_tail_tokens: int) -> ChainCandidates:
        """The newest ``limit`` chains seen within the lookback (older ones are forgotten)."""
        return self.covered(now_ms, default_tail_tokens)[0]

    def covered(
        self, now_ms: float, default_tail_tokens: int
    ) -> tuple[ChainCandidates, tuple[Cover | None, ...]]:
        """:meth:`candidates` and, per chain, the cover noted with it (or None)."""
        seen = self._seen
        horizon = now_ms - self.lookback_ms
        while seen:
            key, (ts, _, _) = next(iter(seen.items()))
            if ts >= horizon:
                break
            del seen[key]
        newest = list(islice(reversed(seen.items()), self.limit))  # ((tenant, chain), value)
        keys = list(map(itemgetter(0), newest))
        values = list(map(itemgetter(1), newest))  # (ts, public, cover)
        k = len(newest)
        return ChainCandidates(
            tuple(map(itemgetter(1), keys)),
            tuple(map(itemgetter(0), keys)),
            np.fromiter(map(itemgetter(1), values), np.int64, k),
            np.full(k, np.nan),
            np.full(k, default_tail_tokens, dtype=np.int64),
            np.full(k, np.nan),
        ), tuple(map(itemgetter(2), values))

    def __len__(self) -> int:
        return len(self._seen)
