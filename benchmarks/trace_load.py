"""Trace-shaped traffic for the sidecar benchmarks: a trace's requests replayed at a given
rate as a router and vLLM engines send them (the arrival, the ``BlockStored`` of its blocks
on its node, the ``BlockRemoved`` of those stored 64 requests earlier there), every cycle
through the trace with new hashes (new conversations) and one new session per request.
``load_sidecar.py`` sends it to a real sidecar process; ``bench_tick_trace.py`` applies it
to a feature state in process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from kvcast.features.events import BlockRemoved, BlockStored
from kvcast.serving.kv_events import KvEventPublisher

DEV_TRACE = Path("/work/shared/traces/mooncake_conversation_dev.jsonl")
U64 = (1 << 64) - 1


def peak_rate(trace: Any) -> tuple[float, float]:
    """(requests in the busiest 1 s window, mean requests per second) of ``trace``."""
    t = np.sort(trace.requests["arrival_ms"].to_numpy(dtype=float))
    ends = np.searchsorted(t, t + 1000.0, side="left")
    peak = float(np.max(ends - np.arange(len(t))))
    return peak, len(t) / max(trace.duration_ms / 1000.0, 1e-9)


class Load:
    """Plays requests of ``trace`` at ``req_per_s``: arrivals over HTTP, KV events over ZMQ
    (one publisher per node; without publishers, :meth:`build` makes the events of
    ``nodes`` nodes for an in-process sidecar)."""

    def __init__(
        self, trace: Any, pubs: list[KvEventPublisher], req_per_s: float, nodes: int = 0
    ) -> None:
        df = trace.requests
        self.hashes = [tuple(int(h) for h in hs) for hs in df["block_hashes"]]
        self.tenants = [str(t) for t in df["tenant"]]
        self.tokens = [(int(i), int(o)) for i, o in zip(df["input_tokens"], df["output_tokens"],
                                                          strict=True)]  # fmt: skip
        self.block_size = trace.block_size
        self.pubs, self.rate = pubs, req_per_s
        self.sent_requests = self.sent_zmq_events = self.sent_hashes = 0
        self.http_accepted = self.http_dropped = self.http_failures = 0
        self.nodes = nodes or len(pubs)
        self._recent: list[list[tuple[int, ...]]] = [[] for _ in range(self.nodes)]

    def salted(self, i: int) -> tuple[int, ...]:
        cycle = i // len(self.hashes)
        base = self.hashes[i % len(self.hashes)]
        return tuple((h * 0x9E3779B97F4A7C15 + cycle * 0x632BE59BD9B4E019) & U64 for h in base)

    def due(self, elapsed_s: float) -> range:
        n = int(self.rate * elapsed_s)
        out = range(self.sent_requests, n)
        self.sent_requests = max(n, self.sent_requests)
        return out

    def emit(self, indices: range, now_ms: float) -> list[dict[str, Any]]:
        """Publish the KV events of requests ``indices``; return their arrivals."""
        arrivals, per_node = self.build(indices, now_ms)
        for node, events in enumerate(per_node):
            if events:
                self.pubs[node].publish_events(events, ts_ms=now_ms)
                self.sent_zmq_events += len(events)
        return arrivals

    def build(self, indices: range, now_ms: float) -> tuple[list[dict[str, Any]], list[list[Any]]]:
        """Requests ``indices``: their arrivals (``POST /v1/requests`` items) and, per node,
        the KV events its engine publishes for them."""
        n = self.nodes
        arrivals = []
        per_node: list[list[Any]] = [[] for _ in range(n)]
        for i in indices:
            node, hashes = i % n, self.salted(i)
            tin, tout = self.tokens[i % len(self.tokens)]
            arrivals.append({
                "request_id": f"q{i}", "node": node, "tenant": self.tenants[i % len(self.tenants)],
                "session": f"s{i}", "block_hashes": list(hashes), "input_tokens": tin,
                "output_tokens": tout,
            })  # fmt: skip
            if not hashes:
                continue
            per_node[node].append(BlockStored(now_ms, node, hashes, None, self.block_size))
            self.sent_hashes += len(hashes)
            recent = self._recent[node]
            recent.append(hashes)
            if len(recent) > 64:  # evict what was stored 64 requests ago on this node
                evicted = recent.pop(0)
                per_node[node].append(BlockRemoved(now_ms, node, evicted))
                self.sent_hashes += len(evicted)
        return arrivals, per_node
