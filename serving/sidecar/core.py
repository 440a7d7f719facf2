"""One sidecar's parts, wired: the queue, the consumer and its feature state, the engine feeds,
the telemetry poller, the model slot, the decision loop and the executor.

Threads: one per engine feed (ZMQ), the consumer, the decision loop. Everything else (HTTP
handlers, telemetry polls, commands to agents) runs on the event loop that called
:meth:`Sidecar.start`. Every producer only puts into the bounded queue, so nothing that
scores or decides can hold up ingestion.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping

import httpx
from pydantic import ValidationError

from kvcast.features.events import BlockRemoved, RequestArrived
from kvcast.features.online.state import FeatureState
from kvcast.predictor.decider import Decider
from kvcast.serving.gc_pacing import GcPacer
from kvcast.serving.http.connection_cuts import ConnectionCuts
from kvcast.serving.http.tenant_tokens import given_tenant_tokens
from kvcast.serving.sidecar.agent_client import AgentClient
from kvcast.serving.sidecar.arrival_rates import ArrivalRates
from kvcast.serving.sidecar.block_tenants import BlockTenants
from kvcast.serving.sidecar.config import Mode, SidecarConfig
from kvcast.serving.sidecar.consumer import StateKeeper
from kvcast.serving.sidecar.decision_log import DecisionLog
from kvcast.serving.sidecar.decision_loop import DecisionLoop
from kvcast.serving.sidecar.decisions import RecentDecisions
from kvcast.serving.sidecar.event_queue import EventQueue
from kvcast.serving.sidecar.executor import SOURCE as REPLICA_SOURCE
from kvcast.serving.sidecar.executor import Executor
from kvcast.serving.sidecar.live_view import LiveView
from kvcast.serving.sidecar.metrics import sidecar_registry, timers
from kvcast.serving.sidecar.model_slot import ModelInfo, ModelSlot
from kvcast.serving.sidecar.node_loads import NodeLoads
from kvcast.serving.sidecar.queue_shares import QueueShares
from kvcast.serving.sidecar.recent_chains import RecentChains
from kvcast.serving.sidecar.recovery import RecoveryReport, read_inventory, recover_locations
from kvcast.serving.sidecar.replicas import ReplicaTracker
from kvcast.serving.sidecar.routes_log import RoutesLog, routes_path
from kvcast.serving.sidecar.seen_requests import SeenRequests
from kvcast.serving.sidecar.telemetry_poller import TelemetryPoller
from kvcast.serving.sidecar.translate import u64
from kvcast.serving.sidecar.zmq_ingest import EngineFeed
from kvcast.serving.tls import TlsFiles

log = logging.getLogger("kvcast.serving.sidecar")
STALE_POLLS, STALE_MIN_S = 5, 5.0  # a queue report older than this (polls, s) is ignored


def _described(info: ModelInfo) -> str:
    """``SOURCE (KIND, DIGEST[, registry version N])``: which model, exactly."""
    version = "" if info.registry_version is None else f", registry version {info.registry_version}"
    return f"{info.source} ({info.kind}, {info.digest}{version})"


def wall_ms() -> float:
    return time.time() * 1000.0


SEEN_REQUEST_IDS = 1 << 16  # request ids remembered against retried posts (shared token)
TENANT_TOKEN_REQUEST_IDS = 1 << 14  # likewise, each tenant token's own


class Sidecar:
    def __init__(
        self, cfg: SidecarConfig, clock_ms: Callable[[], float] = wall_ms,
        tls: TlsFiles | None = None, monotonic: Callable[[], float] = time.monotonic,
        tenant_tokens: Mapping[str, frozenset[str]] | None = None,
    ) -> None:  # fmt: skip
        """``tenant_tokens``: each tenant token (its secret, read at the edge:
        :func:`~kvcast.serving.http.tenant_tokens.read_tenant_tokens`) -> its tenants, one per
        entry of the config's ``tenant_tokens``, in its order; a ValueError when they do not
        match."""
        self.cfg, self.clock_ms = cfg, clock_ms
        self.tenant_tokens = given_tenant_tokens(tenant_tokens, cfg.tenant_tokens)
        fcfg, dcfg = cfg.feature_config, cfg.decider_config
        n, names = len(cfg.nodes), cfg.node_names
        self.mode: Mode = cfg.mode
        self.auth_failures = 0
        # refused to tenant tokens: 403 (a route, another tenant's arrival, a queue depth),
        # 429 (rate, queue share), 400 (a batch over the burst or the whole share)
        self.tenant_refusals = Counter(
            {"route": 0, "tenant": 0, "queue_depth": 0, "rate": 0, "burst": 0, "queue_share": 0}
        )
        self.ingest_refusals = 0  # the ingest token on a route it may not use (403)
        self.arrival_rates = ArrivalRates(cfg.tenant_tokens, monotonic)  # per tenant token
        self.http_cuts = ConnectionCuts()  # connections its API server cut (counted there)
        self.replicas_lost_on_agents = 0  # replicas the agents removed without our command
        self.block_bytes = cfg.kv_block_bytes
        self.queue = EventQueue(cfg.queue_events)
        self.queue_shares = QueueShares(cfg.tenant_tokens, self.queue)  # per tenant token
        # a retried POST counts once; each tenant token remembers its own ids
        self.seen_requests = SeenRequests(SEEN_REQUEST_IDS, TENANT_TOKEN_REQUEST_IDS)
        self.state = FeatureState(
            fcfg, max_blocks=cfg.max_tracked_blocks, max_sessions=cfg.max_tracked_sessions
        )
        self.chains = RecentChains(
            dcfg.loop.lookback_ms, dcfg.loop.max_candidates, fcfg.block_tokens
        )
        self.replicas = ReplicaTracker()
        # which tenants named a block, for a tenant token's lookups (exact names)
        self.block_tenants = (
            BlockTenants([t for e in cfg.tenant_tokens for t in e.tenants],
                         cfg.max_tracked_blocks, fcfg.horizon_ms / 1e3, monotonic)
            if cfg.tenant_tokens else None
        )  # fmt: skip
        stale_s = max(STALE_POLLS * cfg.agents.telemetry_period_s, STALE_MIN_S)
        self.loads = NodeLoads(n, fcfg.prefill, stale_s)
        self.keeper = StateKeeper(self.state, self.queue, self.chains, self.replicas, self.loads)
        self.slot = ModelSlot(self.state.spec, dcfg.window_ms)
        self.recent = RecentDecisions(cfg.recent_decisions)
        self.decider = Decider(dcfg, claim_in_flight=True)  # agents hold copies that land
        tenants = tuple(None if x.tenants is None else frozenset(x.tenants) for x in cfg.nodes)
        self.view = LiveView(
            self.loads, cfg.links, names, self.block_bytes, fcfg.block_tokens, fcfg.prefill,
            tenants, cfg.reactive_pull,
        )  # fmt: skip
        lcfg = cfg.decision_log
        self.decision_log = (
            None if lcfg.path is None
            else DecisionLog(lcfg.path, names, lcfg.rows_per_chunk, lcfg.flush_s,
                             rotate_rows=lcfg.rotate_rows, rotate_s=lcfg.rotate_s)
        )  # fmt: skip
        # the routed requests, beside the decision log (its run's name, its settings)
        self.routes_log = (
            None if self.decision_log is None
            else RoutesLog(routes_path(self.decision_log.path), names, lcfg.rows_per_chunk,
                           lcfg.flush_s, rotate_rows=lcfg.rotate_rows, rotate_s=lcfg.rotate_s)
        )  # fmt: skip
        verify = tls.client_context() if tls is not None else True  # mTLS to the agents
        self.client = httpx.AsyncClient(timeout=cfg.agents.timeout_s, verify=verify)
        agents = [x.agent.rstrip("/") if x.agent else None for x in cfg.nodes]
        self.executor = Executor(
            cfg.agents, agents, self.loads, self.queue, self.replicas, self.keeper,
            AgentClient(self.client, cfg.token_value, cfg.agents.timeout_s), clock_ms,
        )  # fmt: skip
        self.keeper.on_release = self.executor.release
        self.poller = TelemetryPoller(
            agents, self.loads, self.queue, self.client,
            period_s=cfg.agents.telemetry_period_s, timeout_s=cfg.agents.timeout_s,
            bytes_per_token=self.block_bytes / fcfg.block_tokens,
            removals=lambda node: int(self.keeper.gpu_removals[node]),
            pending=self.executor.pairs, clock_ms=clock_ms, agent_client=self.executor.client,
            on_removed=self.replicas_left_agent, on_restarted=self.agent_restarted,
        )  # fmt: skip
        self.registry = sidecar_registry(self)
        # started by the process (run_sidecar), not by an in-process sidecar: it owns the
        # interpreter's collector settings; until then its hook does nothing, nothing is timed
        self.gc = GcPacer(cfg.gc.full_every_s, cfg.gc.thaw_every, self.registry, "kvcast_sidecar_")
        self.loop = DecisionLoop(
            self.keeper, self.slot, self.decider, self.view, mode=lambda: self.mode,
            in_flight=self.executor.pairs, sink=self.executor.submit, recent=self.recent,
            decision_log=self.decision_log, timers=timers(self.registry), tick_ms=cfg.tick_ms,
            block_bytes=self.block_bytes, tail_tokens=dcfg.loop.default_tail_tokens,
            sidecar_id=cfg.sidecar_id, clock_ms=clock_ms, routes_log=self.routes_log,
            between_ticks=self.gc.maybe_collect,
        )  # fmt: skip
        self.feeds = [self._feed(i) for i, x in enumerate(cfg.nodes) if x.engine is not None]
        self.started = False
        self.recovery = RecoveryReport()
        self._agents = agents
        self._housekeeping: asyncio.Task[None] | None = None

    def _feed(self, node: int) -> EngineFeed:
        cfg, x = self.cfg, self.cfg.nodes[node]
        assert x.engine is not None
        return EngineFeed(
            node, x.name, x.engine, self.queue, replay=x.replay, topic=x.topic,
            hwm=cfg.zmq_hwm, replay_timeout_ms=cfg.replay_timeout_ms,
        )  # fmt: skip

    async def _housekeep(self) -> None:
        """Every second: forget replicas whose TTL passed (their agents reclaim them on their
        own, so the feature state is told they left their node, as for an evict command), and
        hand full GC collections back to CPython if the decision thread, which paces them,
        is stuck (:meth:`GcPacer.watch`)."""
        while True:
            await asyncio.sleep(1.0)
            self.expire_replicas()
            self.gc.watch()

    def expire_replicas(self) -> int:
        """One sweep (public for tests); how many replicas left their node."""
        by_node: dict[int, list[int]] = {}
        for node, block in self.replicas.sweep():
            by_node.setdefault(node, []).append(block)
        now = self.clock_ms()
        events = [BlockRemoved(now, n, tuple(blocks)) for n, blocks in sorted(by_node.items())]
        if events:
            self.queue.put(events, REPLICA_SOURCE)
        return sum(map(len, by_node.values()))

    def claim_routed(self, events: Iterable[RequestArrived]) -> int:
        """Active mode: each routed request claims the replicas of its tenant among its
        blocks on its node that the engine has not stored yet, and the node's agent is asked
        to hold them for it until the engine stores those blocks (or ``claim_hold_s``), so
        that they outlive their TTL while the request waits in the engine's queue. Returns
        how many replicas were claimed."""
        if self.mode != "active" or not self.replicas:
            return 0
        hold_s, n = self.cfg.agents.claim_hold_s, 0
        for ev in events:
            hashes = self.replicas.claim(ev.node, ev.tenant, ev.block_hashes, ev.request_id,
                                         hold_s)  # fmt: skip
            if hashes:
                self.executor.hold(ev.node, ev.request_id, ev.tenant, hashes)
                n += len(hashes)
        return n

    def replicas_left_agent(self, node: int, refs: list[tuple[str, int]]) -> list[int]:
        """The agent of ``node`` removed these (tenant, hash) blocks without the sidecar's
        command (on its own, or on a tenant token's): the replicas among them leave the feature
        state's residency and the decider's ledger now, not at their TTL. Returns the hashes
        that left."""
        gone = self.replicas.left_agent(node, refs)
        if gone:
            self.replicas_lost_on_agents += len(gone)
            self.queue.put([BlockRemoved(self.clock_ms(), node, tuple(gone))], REPLICA_SOURCE)
            self.loop.note_lost(node, tuple(gone))
        return gone

    async def agent_restarted(self, node: int, url: str) -> list[int]:
        """The agent of ``node`` started anew: the replicas placed there before are gone with
        its old store, all but those its inventory holds (copied since it came back). They
        leave the view and the ledger now, not at their TTL. An inventory that cannot be read
        counts as empty (a copy wrongly forgotten may be sent again; one wrongly kept would
        be routed to). Returns the hashes that left."""
        placed = self.replicas.on_node(node)
        if not placed:
            return []
        try:
            inv = await read_inventory(self.client, url, self.cfg.token_value,
                                       self.cfg.agents.timeout_s)  # fmt: skip
            held = {(b.tenant, u64(b.block_hash)) for b in inv.blocks}
        except (httpx.HTTPError, ValidationError) as err:
            log.warning("node %d's inventory unread after its agent restarted (%s): its "
                        "replicas are taken as gone", node, err)  # fmt: skip
            held = set()
        return self.replicas_left_agent(node, [r for r in placed if r not in held])

    async def start(self, *, decisions: bool = True) -> None:
        """Load the configured model, then start every part (``decisions=False``: no tick
        thread; tests then call ``self.loop.tick()`` themselves)."""
        if self.cfg.model is not None:
            info = await asyncio.to_thread(self.slot.load, self.cfg.model)  # refused: raised
            log.info("model %s loaded", _described(info))
        self.executor.bind(asyncio.get_running_loop())
        self.keeper.start()
        try:
            for feed in self.feeds:
                await asyncio.to_thread(feed.start)
            await self.recover()
        except BaseException:
            await self.stop()
            raise
        self.poller.start()
        self._housekeeping = asyncio.create_task(self._housekeep())
        if decisions:
            self.loop.start()
        self.started = True

    async def recover(self) -> RecoveryReport:
        """Rebuild block locations from the agents' inventories (see :mod:`.recovery`) and
        wait until the feature state has them, so the first tick sees every copy."""
        cfg = self.cfg
        r = self.recovery = await recover_locations(
            self._agents, self.client, cfg.token_value, queue=self.queue, replicas=self.replicas,
            block_tokens=cfg.feature_config.block_tokens, timeout_s=cfg.agents.timeout_s,
            clock_ms=self.clock_ms,
        )  # fmt: skip
        try:  # the first tick then sees them; a huge inventory only delays that, not the start
            async with asyncio.timeout(cfg.agents.timeout_s):
                while len(self.queue):
                    await asyncio.sleep(0.005)
                await asyncio.wrap_future(self.keeper.ask(lambda k: None))
        except TimeoutError:
            log.warning("recovery: %d events still queued after %.1f s; going on",
                        len(self.queue), cfg.agents.timeout_s)  # fmt: skip
        if r.agents_read or r.agents_failed:
            log.info(
                "recovered %d block locations (%d speculative replicas, %d of them claimed) "
                "from %d of %d agents in %.3f s", r.blocks, r.replicas, r.claimed, r.agents_read,
                r.agents_read + len(r.agents_failed), r.seconds,
            )  # fmt: skip
        return r

    def load_model(self, source: str) -> ModelInfo:
        """Swap in ``source`` at run time (:meth:`ModelSlot.load`), logged as a mode switch
        is: the model it replaced and the one now scoring, or why it was refused (and the
        running one kept)."""
        before = self.slot.current
        was = "no model" if before is None else _described(before.info)
        try:
            info = self.slot.load(source)
        except Exception as err:
            log.warning("model %s refused, %s kept: %s", source, was, err)
            raise
        log.info("model %s loaded (was %s)", _described(info), was)
        return info

    def set_mode(self, mode: Mode) -> None:
        """Switch modes. Shadow to active starts the decider from an empty ledger: the copies
        it decided in shadow mode never happened, and it must not wait for them to expire."""
        if mode == self.mode:
            return
        log.info("mode %s -> %s", self.mode, mode)
        with self.loop.switch_lock:  # a tick in progress ends with the mode it began with
            if mode == "active":
                self.decider = self.loop.decider = Decider(
                    self.cfg.decider_config, claim_in_flight=True
                )
            self.mode = mode

    def ready(self) -> dict[str, bool]:
        """What /readyz checks; ready when all hold."""
        tick_s = 5 * self.cfg.tick_ms / 1000.0 + 1.0
        return {
            "consumer": self.keeper.running,
            "model": self.slot.current is not None,
            "decisions": self.loop.running and time.monotonic() - self.loop.last_tick_at < tick_s,
            "engine_feeds": all(f.alive for f in self.feeds),
        }

    async def stop(self) -> None:
        await asyncio.to_thread(self.loop.stop)
        if self._housekeeping is not None:
            self._housekeeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._housekeeping
        await self.poller.stop()
        await self.executor.drain(self.cfg.shutdown_grace_s)
        for feed in self.feeds:
            await asyncio.to_thread(feed.stop)
        await asyncio.to_thread(self.keeper.stop)
        with contextlib.suppress(Exception):
            await self.client.aclose()
        if self.decision_log is not None:
            await asyncio.to_thread(self.decision_log.close)
        if self.routes_log is not None:
            await asyncio.to_thread(self.routes_log.close)
        self.started = False
