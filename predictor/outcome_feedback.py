"""Are the decider's copies used as often as it expected? Learnt from what became of them.

A copy pays only if its request comes within the copy's life *and* the router sends it to the
copy's node. Neither is certain when the decision is made: the scorer's probability is
calibrated over every candidate block, not over the few chains the decider picks (those
whose holder is busy, a biased sample), and the router changes its mind between the decision
and the arrival (queues move; a load-driven router such as Dynamo's, whose cost is mostly
decode load, sends a request wherever the load is least when it comes). On the bundled
conversation trace under ``dynamo_kv`` the rule model's copies were made at P = 0.17 and
about 1% were used; the oracle's (P = 1) 60%.

:class:`OutcomeFeedback` watches each copy (its deepest block, node, expiry and the P it was
made with; two copies of one chain on two nodes are two watches) and settles it once: *used*
when the first request containing that block is routed to the copy's node while it lives,
*unused* when that request goes elsewhere or the copy expires first. The decider multiplies
P(hit) by ``(s + used) / (s + expected)``, where ``expected`` is the sum of the P of the
settled copies and ``s`` a prior worth that many expected hits at a factor of 1; both sums lose
half their weight every ``half_life_ms``. When copies keep going unused the factor falls and
the decider copies less; once it stops, the factor drifts back to 1 and it tries again, so a
change in the traffic or the router is found.

A copy's outcome comes only when its request does, or its life ends (tens of seconds), so
a burst of copies made at a miscalibrated P would be all spent before the first outcome is
back. With ``count_live`` (the default) the copies still live count as expected and not yet
used: ``expected`` also holds their P until they settle. On the bundled conversation trace
under ``dynamo_kv``, LightGBM's copies (four seeds): 383 -> 283 GB replicated with the same
P50 TTFT; the oracle's copies, all used or nearly, are unchanged (2026-12-04).

The sidecar feeds it the requests its router posted since the last tick; in shadow mode no
copy exists, so what it learns there is how often the router would have sent the request to
the copy's node anyway.

Promotions are not corrected: a promoted block serves its node's own requests and, under a
pulling router (Mooncake's), other nodes' pulls too, so "routed to its node" undercounts its
use; on the tiered bundled trace the correction cut the oracle's useful promotions (P50 TTFT
+3% at x1 over three seeds).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from kvcast.predictor.decider_config import FeedbackConfig

FATES = ("used", "routed_to_source", "routed_elsewhere", "expired")


class Watch(NamedTuple):
    """One copy being watched (its chain's deepest block and its node are the key)."""

    expiry_ms: float  # the copy's end of life: it is gone at this instant (as the ledger's)
    p: float  # P(used) it was made with, before this feedback's factor
    source: int  # the node it was copied from (-1: unknown)
    depth: int  # the deepest block's index in the chain (-1: unknown)


class OutcomeFeedback:
    def __init__(self, cfg: FeedbackConfig) -> None:
        self.cfg = cfg
        # deepest block -> node -> the copy there: several nodes may hold copies of one chain
        self._watch: dict[int, dict[int, Watch]] = {}
        self._next_expiry = float("inf")  # no watched copy expires before this (a lower bound)
        self._watching = 0  # copies watched
        self._depths: Counter[int] = Counter()  # watched copies per depth (-1: unknown)
        self._used = self._expected = 0.0  # decayed sums over the settled copies
        self._live_p = 0.0  # the P of the copies watched (not decayed: they are current)
        self._at = 0.0  # when the sums were last decayed
        self.settled = 0  # copies settled (not decayed)
        self.used = 0
        self.fates: Counter[str] = Counter()  # settled copies by fate (FATES)
        self.last_factor = 1.0  # the factor last computed (for metrics: no decay on read)

    def __len__(self) -> int:
        return self._watching

    @property
    def watching(self) -> bool:
        """Whether some copy's outcome is awaited (else :meth:`observe` has nothing to do)."""
        return bool(self._watch)

    def watched(self, block: int) -> dict[int, Watch]:
        """The copies watched whose deepest block is ``block``, by node (a new dict)."""
        return dict(self._watch.get(block, {}))

    def watch(
        self, block: int, node: int, expiry_ms: float, p: float, source: int = -1, depth: int = -1
    ) -> None:
        """A copy of a chain down to ``block`` (its index in the chain: ``depth``, -1 when
        unknown) is on its way to ``node`` (from ``source``), live until expiry, made at
        P(used) = ``p`` (before this feedback's factor). A copy of the same chain to another
        node is watched beside it; a new one to the same node replaces its watch."""
        copies = self._watch.setdefault(block, {})
        old = copies.pop(node, None)
        if old is not None:
            self._unwatched(old)
        copies[node] = Watch(expiry_ms, p, source, depth)
        if expiry_ms < self._next_expiry:
            self._next_expiry = expiry_ms
        self._watching += 1
        self._depths[depth] += 1
        self._live_p += p

    def observe(self, node: int, blocks: Sequence[int], now_ms: float) -> None:
        """A request was routed to ``node`` with ``blocks``: settle the copies it reads (each
        copy of the chain: used where the request went, unused elsewhere).

        Block hashes are prefix-chained (a hash names its whole prefix, so it sits at one
        index in every chain), so only the blocks at the watched depths are looked up: a few
        dict lookups per request instead of a pass over its blocks, unless a copy's depth is
        unknown or the watched depths outnumber the request's blocks."""
        watch = self._watch
        if not watch:
            return
        depths, n = self._depths, len(blocks)
        if -1 in depths or len(depths) >= n:
            hits = list(watch.keys() & set(blocks))
        else:
            hits = [b for d in depths if d < n and (b := blocks[d]) in watch]
        for b in sorted(hits):  # one order whichever way they were found (float sums)
            for target, w in sorted(watch.pop(b).items()):
                self._unwatched(w)
                if w.expiry_ms <= now_ms:
                    fate = "expired"
                elif node == target:
                    fate = "used"
                else:
                    fate = "routed_to_source" if node == w.source else "routed_elsewhere"
                self._settle(w.p, fate, now_ms)

    def expire(self, now_ms: float) -> None:
        """Settle, unused, the copies whose life ended before their request came (at their
        expiry instant, as the ledger evicts them)."""
        if now_ms < self._next_expiry:  # nothing is due: no pass over every watch
            return
        gone, soonest = [], float("inf")
        for b, copies in self._watch.items():
            for node, w in copies.items():
                if w.expiry_ms <= now_ms:
                    gone.append((b, node))
                elif w.expiry_ms < soonest:
                    soonest = w.expiry_ms
        self._next_expiry = soonest
        for b, node in gone:
            w = self._pop(b, node)
            assert w is not None
            self._settle(w.p, "expired", now_ms)

    def forget(self, node: int, blocks: Iterable[int]) -> None:
        """The copies on ``node`` whose deepest block is among ``blocks`` are gone before
        their request could come (the copy failed, or the node evicted it): stop watching
        them, unsettled, since their fate says nothing about the probability they were made
        with."""
        for b in blocks:
            self._pop(b, node)

    def _pop(self, block: int, node: int) -> Watch | None:
        """Stop watching the copy of ``block``'s chain on ``node``; the watch, if there was
        one."""
        copies = self._watch.get(block)
        if copies is None or node not in copies:
            return None
        w = copies.pop(node)
        if not copies:
            del self._watch[block]
        self._unwatched(w)
        return w

    def factor(self, now_ms: float) -> float:
        """What P(hit) is multiplied by: copies used per copy expected (1 with no outcome)."""
        if not self.cfg.enabled:
            return 1.0
        self._decay(now_ms)
        s = self.cfg.strength
        live = self._live_p if self.cfg.count_live else 0.0
        self.last_factor = (s + self._used) / (s + self._expected + live)
        return self.last_factor

    def _unwatched(self, w: Watch) -> None:
        self._watching -= 1
        # (back to exactly 0 with no copy left: the running sum's rounding does not last)
        self._live_p = self._live_p - w.p if self._watching else 0.0
        left = self._depths[w.depth] - 1
        if left:
            self._depths[w.depth] = left
        else:
            del self._depths[w.depth]

    def _settle(self, p: float, fate: str, now_ms: float) -> None:
        used = fate == "used"
        self._decay(now_ms)
        self._expected += p
        self._used += used
        self.settled += 1
        self.used += used
        self.fates[fate] += 1

    def _decay(self, now_ms: float) -> None:
        dt = now_ms - self._at
        if dt > 0.0:
            keep = 0.5 ** (dt / self.cfg.half_life_ms)
            self._used *= keep
            self._expected *= keep
            self._at = now_ms
