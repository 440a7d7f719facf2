"""The decision loop: on every tick, candidates -> feature rows -> scorer -> decider -> commands.

It runs on a thread of its own. The consumer thread takes the tick's snapshot between two
chunks of events (:mod:`.tick_input`); scoring, the cluster view and the decider run here,
so neither ever holds up ingestion. Each command becomes a :class:`Decision`: kept for
``GET /v1/decisions``, written to the decision log, and in active mode handed to the
executor. Without a model nothing is scored, but replicas whose TTL ran out are still evicted.
A tick that fails is counted and logged; the next one starts afresh.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from prometheus_client import Histogram

from kvcast.predictor.cluster_view import ChainCandidates
from kvcast.predictor.decider import Decider
from kvcast.predictor.scorer import OnnxScorer
from kvcast.serving.sidecar.consumer import StateKeeper
from kvcast.serving.sidecar.decision_log import DecisionLog
from kvcast.serving.sidecar.decisions import Decision, RecentDecisions, make_decision
from kvcast.serving.sidecar.live_view import LiveView
from kvcast.serving.sidecar.model_slot import ModelSlot
from kvcast.serving.sidecar.routes_log import RoutesLog
from kvcast.serving.sidecar.tick_input import TickInput, snapshot

log = logging.getLogger("kvcast.serving.sidecar")
SNAPSHOT_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class TickTimers:
    tick: Histogram  # the whole tick, snapshot to commands handed over
    features: Histogram  # feature rows of the candidates
    scoring: Histogram  # the ONNX scorer
    decide: Histogram  # cluster view + decider
    logs: Histogram  # after the tick: the routes and decision logs' writes


class DecisionLoop:
    def __init__(
        self,
        keeper: StateKeeper,
        slot: ModelSlot,
        decider: Decider,
        view: LiveView,
        *,
        mode: Callable[[], str],
        in_flight: Callable[[], Mapping[tuple[int, int], int]],
        sink: Callable[[list[Decision]], None],
        recent: RecentDecisions,
        decision_log: DecisionLog | None,
        timers: TickTimers,
        tick_ms: float,
        block_bytes: int,
        tail_tokens: int,
        sidecar_id: str,
        clock_ms: Callable[[], float] = lambda: time.time() * 1000.0,
        routes_log: RoutesLog | None = None,
        between_ticks: Callable[[], object] | None = None,
    ) -> None:
        self.keeper, self.slot, self.decider, self.live = keeper, slot, decider, view
        self.mode, self.in_flight, self.sink = mode, in_flight, sink
        # held while a tick reads the mode and the decider, and while a switch changes them:
        # a tick runs start to end with the pair it began with
        self.switch_lock = threading.Lock()
        self.recent, self.log, self.timers = recent, decision_log, timers
        self.routes_log = routes_log
        self.between_ticks = between_ticks  # run after each tick and its logs (the paced GC)
        self.tick_ms, self.block_bytes, self.tail_tokens = tick_ms, block_bytes, tail_tokens
        self.sidecar_id, self.clock_ms = sidecar_id, clock_ms
        self.ticks = 0
        self.errors = 0
        self.skipped: Counter[str] = Counter()  # ticks that scored nothing, by reason
        self.decisions: Counter[str] = Counter()  # by kind
        self.last_tick_at = 0.0  # monotonic seconds of the last completed tick
        self._now = float("-inf")
        self._serial = 0
        self.run_id = secrets.token_hex(3)  # command ids stay unique across restarts
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lost: deque[tuple[int, tuple[int, ...]]] = deque()  # (node, blocks) to forget

    def note_lost(self, node: int, blocks: tuple[int, ...]) -> None:
        """Copies of ``blocks`` on ``node`` are gone before their TTL (the agent evicted
        them): the decider forgets them at the next tick. Any thread."""
        self._lost.append((node, blocks))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sidecar-decisions", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        period = self.tick_ms / 1000.0
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # one bad tick must not stop the loop
                self.errors += 1
                log.exception("decision tick failed")
            if self.between_ticks is not None:
                try:
                    self.between_ticks()
                except Exception:
                    log.exception("between ticks")
            next_at += period
            now = time.monotonic()
            if next_at < now:  # late: skip the ticks that were missed
                next_at = now + period - (now - next_at) % period
            self._stop.wait(next_at - now)

    def tick(self) -> list[Decision]:
        """One decision tick (public for tests and benchmarks): its commands, handed to the
        sink, then the logs' writes. The tick's timer stops before the writes (a row group of
        the routes log takes milliseconds: never on the way of a command), and a tick that
        fails still writes them."""
        try:
            out = self._decide()
        except Exception:
            try:
                self._write_logs([])
            except Exception:  # the tick's own error is the one to raise
                log.exception("decision logs not written after a failed tick")
            raise
        self._write_logs(out)
        self.ticks += 1  # a tick completes with its logs (readiness reads the time)
        self.last_tick_at = time.monotonic()
        return out

    def _write_logs(self, out: list[Decision]) -> None:
        t = time.perf_counter()
        if self.routes_log is not None:
            self.routes_log.maybe_flush()
        if self.log is not None:
            self.log.add(out)
            self.log.maybe_flush()
        self.timers.logs.observe(time.perf_counter() - t)

    def _decide(self) -> list[Decision]:
        t0 = time.perf_counter()
        now = self._now = max(self.clock_ms(), self._now)
        with self.switch_lock:
            mode, decider = self.mode(), self.decider
        model = self.slot.current
        if model is None:
            self.skipped["no_model"] += 1
            inp = None
            cands, probs = ChainCandidates.build([]), np.zeros(0)
        else:
            future = self.keeper.ask(lambda k: snapshot(k, now, self.tail_tokens))
            inp = future.result(SNAPSHOT_TIMEOUT_S)
            self.timers.features.observe(inp.features_s)
            cands, probs = inp.cands, self._score(model.scorer, inp)
        t1 = time.perf_counter()
        hbm = inp.hbm if inp is not None else {}
        removals = inp.removals if inp is not None else self.keeper.gpu_removals.copy()
        view = self.live.view(now, hbm, self.in_flight(), removals)
        holders = inp.holders if inp is not None and len(probs) else None
        if inp is not None:
            decider.observe_arrivals(inp.routed)  # were its copies used?
        lost = self._lost
        while lost:
            decider.forget(*lost.popleft())
        commands = decider.decide(cands, probs, view, holders)
        self.timers.decide.observe(time.perf_counter() - t1)
        digest = model.info.digest if model is not None else ""
        out = []
        for cmd in commands:
            self._serial += 1
            ident = f"{self.sidecar_id}-{self.run_id}-{self._serial}"
            out.append(make_decision(
                cmd, ident=ident, tick=self.ticks, now_ms=now, mode=mode,
                block_bytes=self.block_bytes, cands=cands, probs=probs, model=digest,
            ))  # fmt: skip
            self.decisions[out[-1].kind] += 1
        self.recent.add(out)
        if mode == "active" and out:
            self.sink(out)
        self.timers.tick.observe(time.perf_counter() - t0)
        return out

    def _score(self, scorer: OnnxScorer, inp: TickInput) -> np.ndarray:
        if not len(inp.blocks):
            self.skipped["no_candidates"] += 1
            return np.zeros(0)
        t = time.perf_counter()
        p = scorer.score(inp.rows)
        self.timers.scoring.observe(time.perf_counter() - t)
        return np.asarray(p, dtype=float)[inp.where]
