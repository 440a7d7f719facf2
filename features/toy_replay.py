"""A stand-in event stream from a request table, until the simulator provides real ones.

Not a cluster model: deterministic and tiny, for tests and benchmarks of the feature code.
Each request goes to node ``(second block hash, else first, else 0) % nodes``; its blocks are
stored there at arrival (``BlockStored``) and each node evicts least-recently-used blocks past
``capacity_blocks`` (``BlockRemoved``). Every ``telemetry_period_ms`` each node reports a
``TelemetrySample`` whose queue is the requests it received in the last 10 s.
"""

from __future__ import annotations

from collections import deque

import pandas as pd

from kvcast.features.events import (
    BlockRemoved,
    BlockStored,
    Event,
    RequestArrived,
    TelemetrySample,
)

QUEUE_WINDOW_MS = 10_000.0


def place(hashes: tuple[int, ...], nodes: int) -> int:
    return (hashes[1] if len(hashes) > 1 else hashes[0] if hashes else 0) % nodes


def toy_events(
    requests: pd.DataFrame,
    nodes: int = 4,
    telemetry_period_ms: float = 1000.0,
    capacity_blocks: int = 4000,
    block_bytes: int = 512 * 327_680,
) -> list[Event]:
    """Events in time order for a canonical request table (see ``features.traces.table``)."""
    out: list[Event] = []
    lru: list[dict[int, None]] = [{} for _ in range(nodes)]
    recent: list[deque[tuple[float, int]]] = [deque() for _ in range(nodes)]
    evictions = [0] * nodes
    next_tick = 0.0
    cols = zip(
        requests["arrival_ms"].tolist(),
        requests["request_id"].tolist(),
        requests["tenant"].tolist(),
        requests["session"].tolist(),
        requests["input_tokens"].tolist(),
        requests["output_tokens"].tolist(),
        requests["block_hashes"].tolist(),
        strict=True,
    )
    for ts, rid, tenant, session, n_in, n_out, blocks in cols:
        while next_tick <= ts:
            out += _telemetry(next_tick, recent, lru, evictions, capacity_blocks, block_bytes)
            next_tick += telemetry_period_ms
        hashes = tuple(int(h) for h in blocks)
        node = place(hashes, nodes)
        sess = None if pd.isna(session) else str(session)
        out.append(
            RequestArrived(ts, str(rid), node, str(tenant), sess, int(n_in), int(n_out), hashes)
        )
        if hashes:
            out.append(BlockStored(ts, node, hashes, None, 512))
        cache = lru[node]
        for h in hashes:
            cache.pop(h, None)
            cache[h] = None
        gone = []
        while len(cache) > capacity_blocks:
            gone.append(next(iter(cache)))
            del cache[gone[-1]]
        if gone:
            evictions[node] += len(gone)
            out.append(BlockRemoved(ts, node, tuple(gone)))
        recent[node].append((ts, int(n_in)))
    return out


def _telemetry(
    ts: float,
    recent: list[deque[tuple[float, int]]],
    lru: list[dict[int, None]],
    evictions: list[int],
    capacity_blocks: int,
    block_bytes: int,
) -> list[Event]:
    samples: list[Event] = []
    for node, q in enumerate(recent):
        while q and q[0][0] + QUEUE_WINDOW_MS <= ts:
            q.popleft()
        used = len(lru[node]) * block_bytes
        samples.append(
            TelemetrySample(
                ts_ms=ts,
                node=node,
                queue_len=len(q),
                queued_prefill_tokens=sum(n for _, n in q),
                running_decodes=len(q),
                active_tokens=sum(n for _, n in q),
                capacity_bytes=capacity_blocks * block_bytes,
                used_bytes=used,
                cached_bytes=used,
                speculative_bytes=0,
                evictions_total=evictions[node],
                est_queue_ms=100.0 * len(q),
                transfers_in_flight=0,
            )
        )
    return samples
