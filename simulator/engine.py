"""The discrete-event loop: arrivals, routing, reactive pulls, prefill iterations, decode,
replication ticks and telemetry, in simulated milliseconds. The replication ticks and the
commands they return are carried out by :mod:`kvcast.simulator.replication_hooks`.

Walk of one request: ``_arrive`` matches its block chain against every node's HBM through the
shared ``holders`` index (block -> bitmask of nodes), asks the routing policy for a node
(and maybe a pull of KV from another node, booked by :mod:`kvcast.simulator.pulls`), claims
the speculative replicas of the cached prefix it was routed for (held until its prefill starts
and reads them), and either enqueues it at once or when the pull lands (``_pull_done``). The
node's scheduler (:mod:`kvcast.simulator.node`) runs prefill iterations; when its prefill ends
the first token is out (TTFT) and decode begins; when decode ends its blocks are released to
the node's LRU. Every step can be watched through the event stream of
:mod:`kvcast.features.events`.
"""

from __future__ import annotations

import heapq
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from kvcast.features.events import (
    BlockRemoved,
    BlockStored,
    Event,
    RequestArrived,
    TelemetrySample,
)
from kvcast.features.traces.table import Trace
from kvcast.predictor.chains import prefix_lengths
from kvcast.simulator.block_pool import BlockPool
from kvcast.simulator.config import SimConfig
from kvcast.simulator.event_kinds import DECODE, ITER, PROMOTE, PULL, REPL, TELEM, TICK
from kvcast.simulator.load import (
    MAX_TELEMETRY_PERIODS,
    LoadOutOfRange,
    TraceArrays,
    check_ticks,
    load_scaled,
)
from kvcast.simulator.metrics import RequestLog, SimResult, Timeline
from kvcast.simulator.network import Network
from kvcast.simulator.node import LiveRequest, Node
from kvcast.simulator.policies import create_policy
from kvcast.simulator.policies.base import ROUTED_INDEX_VIEWS, RoutingContext, RoutingPolicy
from kvcast.simulator.policies.registry import policy_prefix_view
from kvcast.simulator.pulls import Pull, ReactivePulls
from kvcast.simulator.replication import Replicator
from kvcast.simulator.replication_hooks import ReplicationHooks
from kvcast.simulator.routed_index import RoutedIndex

Observer = Callable[[Event], None]
ArrivalHook = Callable[[int, Sequence[int], float], None]  # node, blocks, now (ms)
Progress = Callable[[int, int], None]


class Simulator(ReplicationHooks):
    """Replays one trace through one cluster under one routing policy (and replicator)."""

    def __init__(
        self,
        trace: Trace,
        cfg: SimConfig,
        policy: str | RoutingPolicy,
        *,
        time_scale: float = 1.0,
        observers: Sequence[Observer] = (),
        replicator: Replicator | None = None,
    ) -> None:
        self.cfg = cfg
        self.trace = load_scaled(trace, time_scale, cfg)
        self.time_scale = time_scale
        self.block_tokens = cfg.block_tokens or trace.block_size
        self.block_bytes = cfg.block_bytes(self.block_tokens)
        self.policy: RoutingPolicy = (
            create_policy(policy, cfg.routing, num_nodes=cfg.nodes, seed=cfg.seed)
            if isinstance(policy, str)
            else policy
        )
        self.observers = list(observers)
        # a policy that acts ahead of arrivals (oracle, predictive_*) carries its replicator
        if replicator is None:
            replicator = getattr(self.policy, "replicator", None)
        self.replicator = replicator
        if replicator is not None:
            check_ticks(self.trace, replicator.tick_ms)
        # a replicator that learns from the event stream (predictive_lgbm, ...) sees all of it
        attach = getattr(replicator, "observer_for", None)
        consumer = attach(self) if attach is not None else None
        if consumer is not None:
            self.observers.append(consumer)
        # a replicator that learns where the router sent each request (the decider's
        # copies' outcomes) is told so at every accepted arrival, without the event stream
        self._on_arrival: ArrivalHook | None = getattr(replicator, "on_arrival", None)
        self.holders: dict[int, int] = {}
        # which prefixes the router takes a node to hold (summary key ``prefix_view``), and
        # what it knows from its own routing, kept for a view that reads it
        self.prefix_view = policy_prefix_view(self.policy, cfg.routing)
        self.routed = RoutedIndex(cfg.nodes) if self.prefix_view in ROUTED_INDEX_VIEWS else None
        self.network = Network(cfg.network, cfg.nodes)
        cap = cfg.kv_capacity_bytes() // self.block_bytes
        gib = 1 << 30
        quota = replicator.speculative_quota_bytes // self.block_bytes if replicator else 0
        self.nodes: list[Node] = []
        shared: OrderedDict[int, None] = OrderedDict()
        shared_cap = int(cfg.shared_pool.capacity_gib * gib) // self.block_bytes
        for k in range(cfg.nodes):
            pool = BlockPool(
                k,
                cap,
                self.holders,
                dram_capacity=int(cfg.node.dram.capacity_gib * gib) // self.block_bytes,
                nvme_capacity=int(cfg.node.nvme.capacity_gib * gib) // self.block_bytes,
                spec_quota=quota,
                shared=shared,
                shared_capacity=shared_cap,
            )
            if self.observers:
                pool.on_move = self._mover(k)
            self.nodes.append(
                Node(
                    k,
                    cfg.node,
                    pool,
                    self.block_tokens,
                    self.block_bytes,
                    cfg.shared_pool.bandwidth_gbps,
                )
            )
        self.pulls = ReactivePulls([n.pool for n in self.nodes], self.network, self.block_bytes)
        self.now = 0.0
        self._heap: list[tuple[float, int, int, object]] = []
        self._seq = 0
        self.log = RequestLog(len(self.trace))
        self.timeline = Timeline()
        self.replication = {"replications": 0, "blocks_moved": 0, "bytes_pulled": 0}
        self.speculative_peak_over_quota = 0

    # -- plumbing ----------------------------------------------------------------------------
    def _push(self, t: float, kind: int, payload: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, payload))

    def _emit(self, ev: Event) -> None:
        for obs in self.observers:
            obs(ev)

    def _mover(self, node: int) -> Callable[[int, str, str], None]:
        def moved(block: int, medium_from: str, medium_to: str) -> None:
            self._emit(BlockRemoved(self.now, node, (block,), medium_from))  # type: ignore[arg-type]
            if medium_to:
                self._emit(
                    BlockStored(self.now, node, (block,), None, self.block_tokens, medium_to)
                )  # type: ignore[arg-type]

        return moved

    def slo_ms(self, input_tokens: int) -> float:
        s = self.cfg.slo
        if s.mode == "absolute":
            return s.ttft_ms
        return s.floor_ms + s.factor * self.cfg.node.prefill.isolated_ms(input_tokens)

    def transfer_estimate_ms(self, src: int, dst: int, nblocks: int) -> float:
        return self.network.estimate_ms(src, dst, nblocks * self.block_bytes, self.now)

    def match(self, blocks: Sequence[int]) -> list[int]:
        """Per node, the longest prefix of ``blocks`` resident in its HBM."""
        return prefix_lengths(blocks, self.cfg.nodes, self.holders, None)

    # -- request path ------------------------------------------------------------------------
    def _arrive(self, r: int) -> None:
        tr = self._tr
        blocks = tr.blocks(r)
        nb = len(blocks)
        inp = int(tr.inputs[r])
        out_tokens = int(tr.outputs[r])
        bt = self.block_tokens
        now = self.now
        log = self.log
        log.arrival[r] = now
        slo = self.slo_ms(inp)
        log.slo_ms[r] = slo
        nodes = self.nodes
        out_blocks = -(-out_tokens // bt)
        match = self.match(blocks)
        for node in nodes:
            node.est_queue_ms = node.est_queue_ms_at(now)
        ctx = RoutingContext(
            now,
            inp,
            blocks,
            bt,
            match,
            nodes,
            self._prefill_ms,
            self._transfer_ms,
            session=tr.session_col[r],
            slo_ms=slo,
            routed_blocks=self.routed.match(blocks) if self.routed is not None else None,
        )
        d = self.policy.route(ctx)
        log.node[r] = d.node
        if d.reject or nb + out_blocks > nodes[d.node].pool.capacity:
            log.rejected[r] = True
            return
        if self.routed is not None:
            self.routed.note(d.node, blocks)
        node = nodes[d.node]
        local = match[d.node]
        hit = min(local, max(nb - 1, 0))
        req = LiveRequest(r, blocks, inp, max(inp - hit * bt, 1), out_tokens, out_blocks)
        node.route_in(req, max(inp - local * bt, 0), self._prefill_ms(req.est_tokens))
        # the replicas the router counted as its cached prefix are held for it until its
        # prefill reads them (a pull below adds to that prefix on landing; it claims nothing)
        if hit and node.pool.spec:
            req.claimed = node.pool.claim(blocks[:hit])
        if self._on_arrival is not None:
            self._on_arrival(d.node, blocks, now)
        if self.observers:
            self._emit(
                RequestArrived(
                    now,
                    str(tr.ids[r]),
                    d.node,
                    str(tr.tenants[r]),
                    tr.session_col[r],
                    inp,
                    out_tokens,
                    tuple(blocks),
                )
            )
        pull = self.pulls.book(d, blocks, local, now)
        if pull is None:
            self._ready(req)
            return
        self.replication["bytes_pulled"] += pull.nbytes
        log.transferred_blocks[r] = pull.blocks
        self._push(pull.ready_at, PULL, (req, pull))

    def _prefill_ms(self, n: int) -> float:
        return self.cfg.node.prefill.isolated_ms(n)

    def _transfer_ms(self, src: int, dst: int, nblocks: int) -> float:
        return self.network.estimate_ms(src, dst, nblocks * self.block_bytes, self.now)

    def _ready(self, req: LiveRequest) -> None:
        node = self.nodes[self.log.node[req.idx]]
        self.log.ready[req.idx] = self.now
        node.enqueue(req)
        self._kick(node)

    def _pull_done(self, payload: tuple[LiveRequest, Pull]) -> None:
        req, pull = payload
        self.pulls.landed(pull, self.now)
        self._kick(self.nodes[pull.source])  # a request there may have waited for these pins
        self._stored(pull.target, self.pulls.place(pull, self.now))
        self._ready(req)

    def _kick(self, node: Node) -> None:
        end = node.schedule(self.now)
        if end is not None:
            self._push(end, ITER, node)

    def _stored(self, node: int, blocks: Sequence[int], speculative: bool = False) -> None:
        if self.observers and blocks:
            self._emit(
                BlockStored(
                    self.now, node, tuple(blocks), None, self.block_tokens, "GPU", speculative
                )
            )

    def _iteration_done(self, node: Node) -> None:
        now = self.now
        log = self.log
        for req in node.finish_iteration():
            r = req.idx
            log.first_token[r] = now
            log.prefill_start[r] = req.start_ms
            log.cached_blocks[r] = req.hit
            log.lower_tier_blocks[r] = req.lower_blocks
            log.recomputed_tokens[r] = req.uncached
            self._stored(node.node_id, req.blocks[req.hit + req.lower_blocks :])
            tpot = node.start_decode(req, now)
            log.tpot_ms[r] = tpot
            self._push(now + req.output_tokens * tpot, DECODE, (node, req))
        self._kick(node)

    def _decode_done(self, payload: tuple[Node, LiveRequest]) -> None:
        node, req = payload
        node.finish_decode(req)
        self.log.finish[req.idx] = self.now
        self._live -= 1
        self._kick(node)

    # -- telemetry ---------------------------------------------------------------------------
    def _telemetry(self) -> None:
        now, bb = self.now, self.block_bytes
        for n in self.nodes:
            p = n.pool
            sample = TelemetrySample(
                now,
                n.node_id,
                n.queue_len,
                n.queued_prefill_tokens,
                n.running,
                p.in_use * self.block_tokens,
                p.capacity * bb,
                p.used * bb,
                len(p.cached) * bb,
                len(p.spec) * bb,
                p.evictions,
                n.est_queue_ms_at(now),
                int(self.network.in_flight(n.node_id, now)),
            )
            self.timeline.add(sample)
            if self.observers:
                self._emit(sample)
        if self._work_left():
            period = self.cfg.telemetry_period_ms
            if now - self._last_arrival > MAX_TELEMETRY_PERIODS * period:
                raise self.overran(f"{MAX_TELEMETRY_PERIODS:,} telemetry periods of {period:g} ms")
            self._push(now + period, TELEM, None)

    def overran(self, what: str) -> LoadOutOfRange:
        """The error of a run whose requests outlast its last arrival by more than ``what``
        (check_load and check_ticks bound the arrivals' span alone: this bounds the rest)."""
        left = self._n - self._next + self._live
        return LoadOutOfRange(
            f"the run went on for {what} after the last arrival "
            f"({(self.now - self._last_arrival) / 3.6e6:.3g} simulated hours) with "
            f"{left:,} request{'s' if left != 1 else ''} still to serve: the requests take "
            "far longer than the trace (check their input_length and output_length)"
        )

    def _work_left(self) -> bool:
        return self._next < self._n or self._live > 0

    # -- main loop ---------------------------------------------------------------------------
    def run(self, progress: Progress | None = None) -> SimResult:
        t0 = time.perf_counter()
        self._tr = TraceArrays(self.trace)
        self._n = len(self.trace)
        self._next = 0
        self._live = 0
        self._placed = 0
        arrivals = self._tr.arrivals
        self._last_arrival = float(arrivals.max()) if self._n else 0.0
        start = float(arrivals[0]) if self._n else 0.0
        self._push(start, TELEM, None)
        if self.replicator is not None:
            self._push(start, TICK, None)
        heap = self._heap
        handlers: dict[int, Callable[[object], None]] = {
            ITER: self._iteration_done,  # type: ignore[dict-item]
            DECODE: self._decode_done,  # type: ignore[dict-item]
            PULL: self._pull_done,  # type: ignore[dict-item]
            REPL: self._replication_done,  # type: ignore[dict-item]
            PROMOTE: self._promote_done,  # type: ignore[dict-item]
            TELEM: lambda _: self._telemetry(),
            TICK: lambda _: self._tick(),
        }
        n, step = self._n, max(self._n // 100, 1)
        while self._next < n or heap:
            i = self._next
            if heap and (i >= n or heap[0][0] <= arrivals[i]):
                t, _, kind, payload = heapq.heappop(heap)
                self.now = t
                handlers[kind](payload)
            else:
                self.now = float(arrivals[i])
                self._next = i + 1
                self._live += 1
                self._arrive(i)
                if self.log.rejected[i]:
                    self._live -= 1
                if progress is not None and (i + 1) % step == 0:
                    progress(i + 1, n)
        if progress is not None:
            progress(n, n)
        return SimResult.build(self, time.perf_counter() - t0)


def simulate(
    trace: Trace,
    cfg: SimConfig,
    policy: str | RoutingPolicy,
    *,
    time_scale: float = 1.0,
    observers: Sequence[Observer] = (),
    replicator: Replicator | None = None,
    progress: Progress | None = None,
) -> SimResult:
    """Replay ``trace`` through the cluster ``cfg`` under ``policy``; returns the result."""
    sim = Simulator(
        trace, cfg, policy, time_scale=time_scale, observers=observers, replicator=replicator
    )
    return sim.run(progress)
