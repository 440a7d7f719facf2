"""The single consumer: the only thread that touches the :class:`FeatureState`.

It takes event batches from the :class:`EventQueue` in arrival order and applies them, one
event at a time, to the feature state and to the sidecar's own views of the stream (recent
chains, replica hits, per-node request sizes and evictions, and the routed requests the next
decision tick hands to the decider, which learns from them whether its copies are used).
Between chunks of at most ``chunk_events`` it runs *queries* (the decision tick's snapshot, a
block lookup) handed in by other threads, so that they see a consistent state without a lock
around it. When its queue is empty (at most every ``IDLE_EVERY_S``) it packs the feature
state's runs that its events changed (:meth:`StateKeeper.idle`), work that the next decision
tick would otherwise do.

Timestamps: the feature state drops an event older than the newest one it applied (beyond its
``reorder_tolerance_ms``) or than the last decision time. Sources interleave (several engines,
the router, the agents) and their clocks differ slightly, so an event that would be dropped for
its time alone is re-stamped to the earliest time still accepted and counted in
:attr:`restamped` (a growing count means clocks out of step: run NTP).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import numpy as np

from kvcast.features.events import BlockRemoved, BlockStored, Event, RequestArrived
from kvcast.features.online.state import FeatureState
from kvcast.serving.sidecar.event_queue import EventQueue
from kvcast.serving.sidecar.node_loads import NodeLoads
from kvcast.serving.sidecar.recent_chains import RecentChains
from kvcast.serving.sidecar.replicas import Release, ReplicaTracker

log = logging.getLogger("kvcast.serving.sidecar")
R = TypeVar("R")
ROUTED_KEPT = 8_192  # routed requests kept for the next tick (beyond: the oldest go)
IDLE_EVERY_S = 0.025  # the idle step at most this often (a tenth of the default tick)
Routed = tuple[float, int, tuple[int, ...]]  # time (ms), node, block hashes


class StateKeeper:
    def __init__(
        self,
        state: FeatureState,
        queue: EventQueue,
        chains: RecentChains,
        replicas: ReplicaTracker,
        loads: NodeLoads,
        chunk_events: int = 1024,
    ) -> None:
        self.state, self.queue, self.chains = state, queue, chains
        self.replicas, self.loads, self.chunk_events = replicas, loads, chunk_events
        self.applied = 0  # events applied to the feature state
        self.restamped = 0  # events re-stamped to keep the stream in order
        self.gpu_removals = np.zeros(state.cfg.nodes)  # blocks leaving each node's HBM
        self.routed: deque[Routed] = deque(maxlen=ROUTED_KEPT)  # since the last snapshot
        # told (node, claims) when an engine stored blocks that routed requests claimed: the
        # executor's release (set by the sidecar; None: claims are left to their max hold)
        self.on_release: Callable[[int, list[Release]], None] | None = None
        self._idle_at = 0.0  # when the idle step last ran (monotonic seconds)
        self._tol = state.cfg.reorder_tolerance_ms
        self._floor = float("-inf")  # the earliest time the feature state still accepts
        self._newest = float("-inf")
        self._queries: list[tuple[Callable[[StateKeeper], Any], Future[Any]]] = []
        self._qlock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._hooks: dict[type, Callable[[Any], None]] = {
            RequestArrived: self._on_request,
            BlockStored: self._on_stored,
            BlockRemoved: self._on_removed,
        }

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sidecar-consumer", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self.queue.wake()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._serve_queries()  # nobody will run them now: answer (or fail) them here

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- queries from other threads -----------------------------------------------------
    def ask(self, query: Callable[[StateKeeper], R]) -> Future[R]:
        """Run ``query(self)`` on the consumer thread between two chunks of events."""
        future: Future[R] = Future()
        with self._qlock:
            self._queries.append((query, future))
        if not self.running:
            self._serve_queries()
        else:
            self.queue.wake()
        return future

    def commit(self, now_ms: float) -> None:
        """Called by queries that read features at ``now_ms``: older events now re-stamp."""
        self._floor = max(self._floor, now_ms)

    # -- the loop ------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            self._serve_queries()
            for batch in self.queue.get(self.chunk_events, timeout_s=0.05):
                self.apply(batch)
            if not len(self.queue) and time.monotonic() - self._idle_at >= IDLE_EVERY_S:
                try:
                    self.idle()
                except Exception:  # the rows pack what is left at the tick: keep consuming
                    log.exception("consumer idle step failed")
                self._idle_at = time.monotonic()

    def idle(self) -> None:
        """What the consumer does when its queue is empty, at most every ``IDLE_EVERY_S``
        (so that a run that many requests touch between two ticks is packed a few times, not
        once per request; public for benchmarks and single-threaded tests): the feature state
        packs the runs the events changed, so that the next tick's snapshot finds them packed
        (the rows are the same either way)."""
        self.state.refresh()

    def apply(self, batch: list[Event]) -> None:
        """Apply events in order (public for benchmarks and single-threaded tests)."""
        update, hooks = self.state.update, self._hooks
        for ev in batch:
            ts = ev.ts_ms
            if ts < self._floor:
                ev = dataclasses.replace(ev, ts_ms=self._floor)
                self.restamped += 1
            elif ts > self._newest:
                self._newest = ts
                if ts - self._tol > self._floor:
                    self._floor = ts - self._tol
            update(ev)
            hook = hooks.get(type(ev))
            if hook is not None:
                hook(ev)
        self.applied += len(batch)

    def _serve_queries(self) -> None:
        with self._qlock:
            queries, self._queries = self._queries, []
        for query, future in queries:
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(query(self))
            except Exception as err:  # handed back to the asking thread
                future.set_exception(err)

    # -- side views of the stream ----------------------------------------------------------
    def take_routed(self) -> list[Routed]:
        """The requests routed since the last call (consumer thread: call it in a query)."""
        out = list(self.routed)
        self.routed.clear()
        return out

    def _on_request(self, ev: RequestArrived) -> None:
        self.routed.append((ev.ts_ms, ev.node, ev.block_hashes))
        last = self.state.last_cover  # this request's when it was applied just now
        self.chains.add(ev, last[1] if last is not None and last[0] is ev.block_hashes else None)
        self.loads.note_request(ev.node, ev.input_tokens)
        if self.replicas:
            self.replicas.on_request(ev.node, ev.block_hashes)

    def _on_stored(self, ev: BlockStored) -> None:
        if self.replicas and ev.medium == "GPU" and not ev.speculative:
            # the engine adopted a replica: the requests that claimed it have read it
            released = self.replicas.on_stored(ev.node, ev.block_hashes)
            if released and self.on_release is not None:
                self.on_release(ev.node, released)

    def _on_removed(self, ev: BlockRemoved) -> None:
        if ev.medium == "GPU" and 0 <= ev.node < len(self.gpu_removals):
            self.gpu_removals[ev.node] += len(ev.block_hashes)
