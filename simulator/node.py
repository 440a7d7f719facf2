"""One serving node: its KV block pool, its prefill queue and its decode occupancy.

Prefill runs in iterations (continuous batching with a chunked-prefill token budget): each
iteration takes requests from the head of the FIFO queue until the budget is spent, splitting
the last one. Like vLLM, a request's prefix is matched and pinned when it is first scheduled,
and the blocks it must compute are allocated then (head-of-line blocking when memory is
short); computed blocks are published when its prefill ends. An iteration costs
``a + sum_i (b*k_i + c*((p_i+k_i)^2 - p_i^2))`` for a piece of k_i tokens starting at offset
p_i of request i's uncached tokens, so a request prefilled in one piece costs exactly
``a + b*n + c*n^2``. A request routed to the node claims the speculative replicas of its
cached prefix (:meth:`BlockPool.claim`, done by the engine at arrival) and releases them here
once it started, having pinned those it reads. Decode is modelled as the node's decode pool:
a finished prefill decodes ``output_tokens`` at ``step_ms + per_seq_ms x running`` per token
and holds its blocks (and the output's KV) pinned until done.
"""

from __future__ import annotations

from collections import deque

from kvcast.simulator.block_pool import BlockPool
from kvcast.simulator.config import NodeConfig


class LiveRequest:
    """A request between arrival and the end of its decode."""

    __slots__ = (
        "blocks",
        "claimed",
        "est_ms",
        "est_tokens",
        "hit",
        "idx",
        "input_tokens",
        "lower_blocks",
        "new_blocks",
        "out_blocks",
        "output_tokens",
        "progress",
        "routed_tokens",
        "start_ms",
        "started",
        "uncached",
    )

    def __init__(
        self,
        idx: int,
        blocks: list[int],
        input_tokens: int,
        est_uncached: int,
        output_tokens: int,
        out_blocks: int,
    ) -> None:
        self.idx = idx
        self.blocks = blocks
        self.input_tokens = input_tokens
        self.uncached = est_uncached
        self.est_tokens = est_uncached
        self.est_ms = 0.0
        self.output_tokens = output_tokens
        self.out_blocks = out_blocks
        self.progress = 0
        self.hit = 0
        self.lower_blocks = 0
        self.new_blocks = 0
        self.started = False
        self.start_ms = 0.0
        self.claimed: list[int] = []  # replicas on its node it claimed when routed there
        self.routed_tokens = 0  # its uncached tokens as its router predicted them


class Node:
    """Implements :class:`~kvcast.simulator.policies.base.NodeLoad` for the routers."""

    __slots__ = (
        "_cfg",
        "active_blocks",
        "batch",
        "block_bytes",
        "block_tokens",
        "busy_until",
        "est_ms_sum",
        "est_queue_ms",
        "inflight_prefill_tokens",
        "node_id",
        "outstanding",
        "pool",
        "queue",
        "queue_len",
        "queued_prefill_tokens",
        "running",
        "tier_bytes_per_ms",
    )

    def __init__(
        self,
        node_id: int,
        cfg: NodeConfig,
        pool: BlockPool,
        block_tokens: int,
        block_bytes: int,
        shared_gbps: float = 5.0,
    ) -> None:
        self.node_id = node_id
        self._cfg = cfg
        self.pool = pool
        self.block_tokens = block_tokens
        self.block_bytes = block_bytes
        self.queue: deque[LiveRequest] = deque()
        self.batch: list[tuple[LiveRequest, int]] = []
        self.busy_until = 0.0
        self.outstanding = 0
        self.queue_len = 0
        self.queued_prefill_tokens = 0
        self.inflight_prefill_tokens = 0  # routed here, not past their first token
        self.active_blocks: dict[int, int] = {}  # prompt blocks of unfinished requests: count
        self.running = 0
        self.est_ms_sum = 0.0
        self.est_queue_ms = 0.0  # refreshed by the engine before each routing call
        gb = 1e9 / 1e3
        self.tier_bytes_per_ms = (
            cfg.dram.bandwidth_gbps * gb,
            cfg.nvme.bandwidth_gbps * gb,
            shared_gbps * gb,
        )

    # -- NodeLoad ------------------------------------------------------------------------------
    @property
    def kv_usage(self) -> float:
        return self.pool.in_use / self.pool.capacity

    def est_queue_ms_at(self, now: float) -> float:
        """What a request arriving now would wait: the running iteration's time left, then
        the estimate of every request routed here and not done (queued, or waiting for its
        pull to land), less the part of it the running iteration does (``est_ms_sum`` holds
        the whole estimate of a request until it finishes)."""
        # floating sums of added and removed estimates can leave -1e-13: clamp at zero
        queued = max(self.est_ms_sum, 0.0)
        if not self.batch:
            return queued
        done = 0.0  # of the batch's estimates, the share done once this iteration ends
        for req, k in self.batch:
            if req.uncached > 0:
                done += req.est_ms * min((req.progress + k) / req.uncached, 1.0)
        return max(self.busy_until - now, 0.0) + max(queued - done, 0.0)

    # -- queue -------------------------------------------------------------------------------
    def route_in(self, req: LiveRequest, predicted_tokens: int, est_ms: float) -> None:
        """A request was routed here (it may wait for a pull before :meth:`enqueue`), with
        ``predicted_tokens`` uncached prompt tokens as its router saw them and ``est_ms`` its
        estimated prefill time, counted in the queue estimate from now on: a request waiting
        for its pull to land is work the node has been given (a router that pulls, as
        Mooncake's conductor, would otherwise send the next ones to the same node)."""
        self.outstanding += 1
        self.queue_len += 1
        req.est_ms = est_ms
        self.est_ms_sum += est_ms
        req.routed_tokens = predicted_tokens
        self.inflight_prefill_tokens += predicted_tokens
        active = self.active_blocks
        for b in req.blocks:
            active[b] = active.get(b, 0) + 1

    def enqueue(self, req: LiveRequest) -> None:
        """The request is ready (its pull, if any, landed): into the prefill queue."""
        self.queue.append(req)
        self.queued_prefill_tokens += req.est_tokens

    def _start(self, req: LiveRequest, now: float) -> float | None:
        """Match, pin and allocate for a request's first piece; returns tier load ms or None."""
        pool, blocks = self.pool, req.blocks
        nb = len(blocks)
        m = 0
        while m < nb - 1 and pool.in_hbm(blocks[m]):
            m += 1
        hit = blocks[:m]
        pool.pin(hit, now)
        need = nb - m
        if not pool.make_room(need, now):
            pool.release(hit)
            return None  # its claims stay: it starts (and reads them) later
        if req.claimed:  # read (pinned above) or passed over: the replicas are not its now
            pool.unclaim(req.claimed)
            req.claimed = []
        d, v, sh = pool.lower_prefix(blocks, m)
        room = max(nb - 1 - m, 0)  # the last block is always recomputed
        d = min(d, room)
        v = min(v, room - d)
        sh = min(sh, room - d - v)
        lower = blocks[m : m + d + v + sh]
        pool.take_lower(lower)
        pool.add_active(lower)
        pool.reserved += need - len(lower)
        req.hit = m
        req.lower_blocks = len(lower)
        req.new_blocks = need - len(lower)
        req.uncached = max(req.input_tokens - (m + len(lower)) * self.block_tokens, 1)
        self.queued_prefill_tokens += req.uncached - req.est_tokens
        req.est_tokens = req.uncached
        req.started = True
        req.start_ms = now
        bb = self.block_bytes
        dram_bw, nvme_bw, shared_bw = self.tier_bytes_per_ms
        return bb * (d / dram_bw + v / nvme_bw + sh / shared_bw)

    def schedule(self, now: float) -> float | None:
        """Start an iteration if idle and work is ready; returns its end time."""
        if self.batch or not self.queue:
            return None
        p = self._cfg.prefill
        budget = p.chunk_tokens
        cost = p.a_ms
        b, c = p.b_ms_per_token, p.c_ms_per_token2
        batch = self.batch
        for req in self.queue:
            if not req.started:
                load_ms = self._start(req, now)
                if load_ms is None:
                    break
                cost += load_ms
            k = min(budget, req.uncached - req.progress)
            q = req.progress
            cost += b * k + c * ((q + k) * (q + k) - q * q)
            batch.append((req, k))
            budget -= k
            if budget <= 0:
                break
        if not batch:
            return None
        self.busy_until = now + cost
        return self.busy_until

    def finish_iteration(self) -> list[LiveRequest]:
        """Apply the running iteration; returns the requests whose prefill completed."""
        done: list[LiveRequest] = []
        for req, k in self.batch:
            req.progress += k
            self.queued_prefill_tokens -= k
            if req.progress >= req.uncached:
                done.append(req)
        self.batch = []
        pool = self.pool
        for req in done:
            # finished requests are always a prefix of the FIFO queue (only the last piece of
            # an iteration can be partial)
            self.queue.popleft()
            self.inflight_prefill_tokens -= req.routed_tokens
            self.est_ms_sum -= req.est_ms
            pool.reserved -= req.new_blocks
            new = req.blocks[req.hit + req.lower_blocks :]
            pool.add_active(new)
        self.queue_len -= len(done)
        return done

    def start_decode(self, req: LiveRequest, now: float) -> float:
        """Admit a finished prefill to decode at ``now``; returns its time per output token."""
        d = self._cfg.decode
        tpot = d.step_ms + d.per_seq_ms * self.running
        self.running += 1
        if self.pool.make_room(req.out_blocks, now):  # replicas past their hold go first
            self.pool.reserved += req.out_blocks
        else:
            req.out_blocks = 0
        return tpot

    def finish_decode(self, req: LiveRequest) -> None:
        self.running -= 1
        self.outstanding -= 1
        self.pool.reserved -= req.out_blocks
        active = self.active_blocks
        for b in req.blocks:
            if active[b] == 1:
                del active[b]
            else:
                active[b] -= 1
        self.pool.release(req.blocks)
