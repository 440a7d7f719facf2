"""``kvcast cluster replay``: a trace window played against a running cluster in wall time.

The trace's window ``[start_s, start_s + window_s)`` is de-quantised like the simulator's
input, compressed by ``time_scale`` (the load) and played ``speed`` times faster than its
(scaled) clock. At each arrival the router player picks a node and posts the arrival to the
sidecar; the node's engine player stores the blocks into its agent and publishes the KV
events. Bounded: at most ``max_requests`` requests, no new one after ``max_wall_s``, and the
engines' backlog drained within ``drain_s``. The sidecar and the agents are called over
(mutual) TLS when the targets carry a client certificate (``cluster up --tls``).

The replay's counts carry ``t0_unix_ms``, the wall clock (unix ms, the clock the sidecar
stamps its decisions with) at which the window's time 0 was played, and ``nodes``, the names
the sidecar gives the nodes (read off its metrics when the events go over ZMQ).
:func:`write_played` writes the requests as played, on that clock, as a trace that ``kvcast
shadow-eval`` judges the sidecar's decision log against.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from kvcast.serving.cluster.blocks import BlockMaker
from kvcast.serving.cluster.engine_player import EnginePlayer
from kvcast.serving.cluster.event_sinks import EventSink, HttpSink, ZmqSink, await_subscribers
from kvcast.serving.cluster.layout import ReplayTargets
from kvcast.serving.cluster.node_model import NodeModel
from kvcast.serving.cluster.router_player import (
    POSTS_IN_FLIGHT,
    ROUTERS,
    RouterPlayer,
    TraceRequest,
    arrival_body,
)
from kvcast.serving.cluster.summary import kv_received

Progress = Callable[[int, int], None]


class ReplayInterrupted(Exception):
    """The replay was cancelled (``kvcast cluster replay`` cancels it on SIGINT or SIGTERM)
    after ``requests`` of ``total`` requests were routed and ``posted`` arrivals were posted
    to the sidecar."""

    def __init__(self, requests: int, total: int, posted: int) -> None:
        super().__init__(f"{requests} of {total} requests played, {posted} arrivals posted")
        self.requests, self.total, self.posted = requests, total, posted


@dataclass(frozen=True)
class ReplaySpec:
    """What to play and how; times in seconds (trace time for the window)."""

    start_s: float = 0.0
    window_s: float = 120.0
    time_scale: float = 1.0  # load: arrivals compressed by this (or sessions multiplied)
    load_scaling: str = "arrivals"  # how time_scale raises the load (features.traces.load_scaling)
    speed: float = 1.0  # playback: the scaled trace clock runs this much faster than the wall
    router: str = "prefix_sticky"
    block_bytes: int = 64 << 10
    node_blocks: int | None = None  # engine cache in blocks (None: the agent's capacity
    # beyond its speculative quota, so the engine's blocks and the replicas always fit)
    max_requests: int | None = None
    max_wall_s: float = 900.0  # no request is started after this
    drain_s: float = 60.0  # then the engines get this long to finish
    put_concurrency: int = 8  # PUTs in flight per node
    seed: int = 0  # de-quantisation, tie-breaks and block bytes

    def __post_init__(self) -> None:
        if self.router not in ROUTERS:
            raise ValueError(f"--router {self.router!r}: one of {', '.join(ROUTERS)}")
        from kvcast.features.traces.load_scaling import SCALERS

        if self.load_scaling not in SCALERS:
            raise ValueError(
                f"--load-scaling {self.load_scaling!r}: one of {', '.join(sorted(SCALERS))}"
            )
        positive = {
            "--window-s": self.window_s, "--time-scale": self.time_scale, "--speed": self.speed,
            "--block-bytes": self.block_bytes, "--max-wall-s": self.max_wall_s,
            "put_concurrency": self.put_concurrency,
        }  # fmt: skip
        for flag, value in positive.items():
            if not value > 0:
                raise ValueError(f"{flag} must be > 0, got {value}")


def played_trace(trace: Any, spec: ReplaySpec) -> Any:
    """The window of ``trace`` (a :class:`Trace`) as the replay plays it: de-quantised,
    load-scaled and cut at ``max_requests``; arrivals in scaled ms from the window's start."""
    from kvcast.features.traces.dequantize import spread_quantized
    from kvcast.features.traces.load_scaling import scale_load

    start = spec.start_s * 1000.0
    t = spread_quantized(trace.window(start, start + spec.window_s * 1000.0), seed=spec.seed)
    t = scale_load(t, spec.time_scale, spec.load_scaling, spec.seed)  # type: ignore[arg-type]
    if spec.max_requests is not None:
        t = replace(t, requests=t.requests.iloc[: spec.max_requests].reset_index(drop=True))
    return t


def write_played(played: Any, spec: ReplaySpec, requests: int, path: Path) -> Path:
    """The first ``requests`` of ``played`` (:func:`played_trace`) as a kvcast Parquet trace on
    the wall clock of the replay: arrival ``a`` was played ``a`` ms after ``t0_unix_ms`` (the
    scaled arrival over ``speed``). ``kvcast shadow-eval --trace PATH --spread off
    --clock-offset-ms T0`` then judges the sidecar's decisions against what it was sent."""
    from kvcast.features.traces.parquet_io import write_parquet

    df = played.requests.iloc[:requests].copy()
    df["arrival_ms"] = df["arrival_ms"] / spec.speed
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_parquet(replace(played, requests=df, name=f"{played.name} (played)"), path)


def trace_requests(trace: Any, spec: ReplaySpec) -> list[TraceRequest]:
    """The window of ``trace`` (a :class:`Trace`) as the replay plays it, in scaled time."""
    return requests_of(played_trace(trace, spec))


def requests_of(played: Any) -> list[TraceRequest]:
    """The requests of a :func:`played_trace`."""
    import pandas as pd

    out = []
    for r in played.requests.itertuples(index=False):
        session = None if pd.isna(r.session) else str(r.session)
        chain = tuple(int(h) for h in r.block_hashes)
        out.append(TraceRequest(
            str(r.request_id), float(r.arrival_ms), str(r.tenant), session,
            int(r.input_tokens), int(r.output_tokens), chain,
        ))  # fmt: skip
    return out


async def _capacities(http: httpx.AsyncClient, t: ReplayTargets, spec: ReplaySpec) -> list[int]:
    if spec.node_blocks is not None:
        return [spec.node_blocks] * len(t.agents)
    out = []
    for agent in t.agents:
        r = await http.get(f"{agent}/v1/telemetry")
        r.raise_for_status()
        tel = r.json()
        free = tel["capacity_bytes"] - tel["speculative_quota_bytes"]
        if free < spec.block_bytes:
            raise ValueError(
                f"--block-bytes {spec.block_bytes}: larger than what agent {agent} has for "
                f"cached blocks ({free} bytes: capacity less speculative quota)"
            )
        out.append(free // spec.block_bytes)
    return out


async def run_replay(
    requests: Sequence[TraceRequest], targets: ReplayTargets, spec: ReplaySpec,
    block_tokens: int, progress: Progress | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Play ``requests``; the replay's own counts (see :func:`_play`). The router's arrivals,
    the engines' KV events over HTTP and their queue depths carry the ingest token when the
    targets have one; the engines' block stores and evictions, the shared token."""
    headers, reports = targets.headers(), targets.headers(reports=True)
    limits = httpx.Limits(max_connections=POSTS_IN_FLIGHT + 2, max_keepalive_connections=None)
    tls = None if targets.tls is None else targets.tls.client_context()  # to https:// services
    verify = True if tls is None else tls
    async with httpx.AsyncClient(timeout=10.0, limits=limits, verify=verify) as http:
        caps = await _capacities(http, targets, spec)
        nodes = [NodeModel(i, c, block_tokens) for i, c in enumerate(caps)]
        router = RouterPlayer(spec.router, nodes, block_tokens, spec.block_bytes, seed=spec.seed)
        sinks: list[EventSink] = []
        engines: list[EnginePlayer] = []
        names = targets.names
        try:
            if targets.engines is None:
                sinks += [HttpSink(i, http, targets.sidecar, reports) for i in range(len(nodes))]
            else:
                zmq = [ZmqSink(n, *e) for n, e in zip(targets.names, targets.engines, strict=True)]
                sinks += zmq
                names = await _sidecar_names(zmq, http, targets.sidecar)
            maker = BlockMaker(spec.block_bytes, spec.seed)
            engines += [
                EnginePlayer(i, targets.agents[i], headers, maker, sinks[i], block_tokens,
                             spec.put_concurrency, ssl_context=tls, report_headers=reports)
                for i in range(len(nodes))
            ]  # fmt: skip
            return await _play(requests, targets, spec, http, reports, router, nodes, engines,
                               names, progress)  # fmt: skip
        finally:
            for engine in engines:  # after a failure: what is still running stops now
                await engine.close(0.0)
            for sink in sinks:
                sink.close()


async def _sidecar_names(
    sinks: Sequence[ZmqSink], http: httpx.AsyncClient, sidecar: str
) -> tuple[str, ...]:
    """The sidecar's name of each engine's node, once it receives from every one; a
    ValueError when the engines are not listed in its node order (arrivals, posted by node
    position, would then go to another node than their blocks)."""
    names = tuple(await await_subscribers(sinks, lambda: kv_received(http, sidecar)))
    order = tuple(await kv_received(http, sidecar))  # the sidecar's engines, in node order
    if sorted(order) == sorted(names) and order != names:
        given = ", ".join(f"{s.endpoint} -> {n}" for s, n in zip(sinks, names, strict=True))
        raise ValueError(f"the engines feed the sidecar's nodes out of its node order "
                         f"({', '.join(order)}): {given}; list them in that order")  # fmt: skip
    return names


async def _play(
    requests: Sequence[TraceRequest], targets: ReplayTargets, spec: ReplaySpec,
    http: httpx.AsyncClient, reports: dict[str, str], router: RouterPlayer,
    nodes: list[NodeModel], engines: list[EnginePlayer], names: Sequence[str],
    progress: Progress | None,
) -> dict[str, Any]:  # fmt: skip
    loop = asyncio.get_running_loop()
    t0, lag, stopped, done = loop.time(), 0.0, None, 0
    t0_unix_ms = time.time() * 1000.0  # trace time 0 on the wall clock the sidecar stamps
    posts: set[asyncio.Task[bool]] = set()
    try:
        for req in requests:
            if loop.time() - t0 > spec.max_wall_s:
                stopped = f"max_wall_s={spec.max_wall_s:g}"
                break
            due = t0 + req.arrival_ms / spec.speed / 1000.0
            if (wait := due - loop.time()) > 0:
                await asyncio.sleep(wait)
            lag = max(lag, loop.time() - due)  # behind schedule, a late wake-up included
            node = router.route(req.arrival_ms, req)
            adm = nodes[node].admit(req.arrival_ms, req.tenant, req.block_hashes, req.input_tokens,
                                    req.output_tokens)  # fmt: skip
            body = arrival_body(req, node, adm.queue_depth, time.time() * 1000.0)
            task = asyncio.create_task(router.post(http, targets.sidecar, reports, [body]))
            posts.add(task)
            task.add_done_callback(posts.discard)
            engines[node].submit(adm, req.tenant)
            done += 1
            if progress is not None:
                progress(done, len(requests))
        dispatched_s = loop.time() - t0
        await asyncio.wait_for(asyncio.gather(*posts, *(e.close(spec.drain_s) for e in engines)),
                               spec.drain_s + 10.0)  # fmt: skip
    except asyncio.CancelledError:  # a signal: say what was played so far
        raise ReplayInterrupted(done, len(requests), router.posted) from None
    stats = [e.stats for e in engines]
    return {
        "requests": done,
        "nodes": list(names),
        "routed": dict(zip(names, router.routed, strict=True)),
        "arrivals_posted": router.posted,
        "arrival_failures": router.post_failures,
        "blocks_put": sum(s.blocks_put for s in stats),
        "bytes_put": sum(s.bytes_put for s in stats),
        "put_failures": sum(s.put_failures for s in stats),
        "requests_unfinished": sum(s.dropped for s in stats),
        "blocks_evicted": sum(s.blocks_evicted for s in stats),
        "events_published": sum(e.sink.events for e in engines),
        "event_batches": sum(e.sink.batches for e in engines),
        "engine_cache_blocks": [n.capacity for n in nodes],
        "t0_unix_ms": round(t0_unix_ms, 3),
        "max_lag_s": round(lag, 3),
        "dispatch_s": round(dispatched_s, 3),
        "wall_s": round(loop.time() - t0, 3),
        "stopped_early": stopped,
    }
