"""What the replay knows of one engine: its prefix cache (an LRU of blocks) and its queue.

Pure logic in trace time, no I/O. The cache holds at most ``capacity_blocks`` blocks; a
request's blocks that the node lacks are stored (the engine computed them), its cached ones
refreshed, and the least recently used blocks evicted to make room. The queue is one FIFO
prefill server (``PrefillModel`` time for the uncached tokens) followed by a decode phase of
``decode_ms_per_token`` per output token that does not hold up the queue (continuous
batching). From both come the :class:`NodeSnapshot` a routing rule reads and the queue depth
the engine reports.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from kvcast.prefill import PrefillModel
from kvcast.simulator.policies.base import NodeSnapshot


@dataclass(frozen=True, slots=True)
class Admission:
    """What one request did to a node's cache and queue."""

    node: int
    matched: int  # leading blocks of the chain the node already held
    stored: tuple[int, ...]  # blocks new to the node, in chain order
    parents: tuple[int | None, ...]  # each stored block's parent in the chain
    evicted: tuple[tuple[str, int], ...]  # (tenant, hash) the LRU dropped to make room
    queue_depth: int  # requests waiting for prefill when this one arrived (itself excluded)


@dataclass(frozen=True, slots=True)
class _Job:
    start_ms: float
    prefill_end_ms: float
    decode_end_ms: float
    tokens: int  # uncached prompt tokens
    chain: tuple[int, ...]  # its prompt's blocks


class NodeModel:
    def __init__(
        self, node_id: int, capacity_blocks: int, block_tokens: int,
        prefill: PrefillModel | None = None, decode_ms_per_token: float = 30.0,
    ) -> None:  # fmt: skip
        if capacity_blocks < 1:
            raise ValueError(f"a node caches at least one block, got {capacity_blocks}")
        self.node_id, self.capacity, self.block_tokens = node_id, capacity_blocks, block_tokens
        self.prefill = prefill or PrefillModel()
        self.decode_ms_per_token = decode_ms_per_token
        self.cache: OrderedDict[int, str] = OrderedDict()  # hash -> tenant, oldest first
        self.jobs: list[_Job] = []
        self.free_at_ms = 0.0  # when the prefill server is next idle
        self.requests = self.stored_blocks = self.evicted_blocks = 0

    def match(self, chain: tuple[int, ...]) -> int:
        """Length of the longest prefix of ``chain`` this node holds."""
        n = 0
        for h in chain:
            if h not in self.cache:
                break
            n += 1
        return n

    def _live(self, now_ms: float) -> list[_Job]:
        self.jobs = [j for j in self.jobs if j.decode_end_ms > now_ms]
        return self.jobs

    def snapshot(self, now_ms: float) -> NodeSnapshot:
        jobs = self._live(now_ms)
        prefilling = [j for j in jobs if j.prefill_end_ms > now_ms]
        return NodeSnapshot(
            node_id=self.node_id,
            outstanding=len(jobs),
            queue_len=len(prefilling),
            queued_prefill_tokens=sum(j.tokens for j in prefilling),
            inflight_prefill_tokens=sum(j.tokens for j in prefilling),
            active_blocks=frozenset(h for j in jobs for h in j.chain),
            kv_usage=len(self.cache) / self.capacity,
            est_queue_ms=max(self.free_at_ms - now_ms, 0.0),
        )

    def queue_depth(self, now_ms: float) -> int:
        """Requests waiting for the prefill server (not yet started)."""
        return sum(1 for j in self._live(now_ms) if j.start_ms > now_ms)

    def admit(
        self, now_ms: float, tenant: str, chain: tuple[int, ...], input_tokens: int,
        output_tokens: int,
    ) -> Admission:  # fmt: skip
        """Queue the request and cache its blocks (at most ``capacity`` leading ones)."""
        depth = self.queue_depth(now_ms)
        matched = self.match(chain)
        kept = chain[: self.capacity]
        stored, parents = [], []
        for i, h in enumerate(kept):
            if h in self.cache:
                self.cache.move_to_end(h)
            else:
                self.cache[h] = tenant
                stored.append(h)
                parents.append(kept[i - 1] if i else None)
        evicted = []
        while len(self.cache) > self.capacity:
            h, owner = self.cache.popitem(last=False)
            evicted.append((owner, h))
        uncached = max(input_tokens - matched * self.block_tokens, 0)
        start = max(now_ms, self.free_at_ms)
        self.free_at_ms = start + self.prefill.isolated_ms(uncached)
        decode_end = self.free_at_ms + output_tokens * self.decode_ms_per_token
        self.jobs.append(_Job(start, self.free_at_ms, decode_end, uncached, chain))
        self.requests += 1
        self.stored_blocks += len(stored)
        self.evicted_blocks += len(evicted)
        return Admission(
            self.node_id, matched, tuple(stored), tuple(parents), tuple(evicted), depth
        )
