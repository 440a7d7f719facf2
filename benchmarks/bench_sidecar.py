"""Router sidecar speed: KV-event ingestion rate and the decision tick; prints one JSON object.

Ingestion, on one core (one thread): vLLM ``KVEventBatch`` payloads (msgpack as vLLM >= 0.26
writes them: array batch, map events, u64 hashes; 32 events per batch, 2 hashes per event on
average, a third of them removals) decoded by the sidecar's decoder, put in its bounded queue,
taken by its consumer and applied to the ``FeatureState``: events per CPU second. Then the
same payloads end to end over loopback ZMQ from a publisher process through the sidecar's
feed and consumer threads (one Python interpreter: one core's worth, the GIL shared).
Same-run baselines on the same payloads: msgpack decoding alone (msgspec, the floor of any
decoder), ``decode_batch`` alone, and ``FeatureState.update`` alone.

Tick over 1,024 candidate blocks (128 chains of 8 blocks on 8 nodes, after 4,096 arrivals and
telemetry; ticks 250 ms apart, with 4 new requests for those chains before each, so that
nothing a tick derives from the state is the same as the last tick's, then the consumer's idle
step, which packs the runs they changed): the consumer-side
snapshot (candidates, feature rows, GPU holders), ONNX scoring
and the cluster view + decider, exactly as the decision loop runs them, with a fresh decider
ledger every tick (every chain is weighed each time: the worst case; ``tick_steady_ledger``
keeps one decider across ticks, as the loop does). Baseline: the same tick with the
simulator's model-free recency probabilities instead of features + ONNX. Latencies are
per-thread CPU time (the machines are shared; wall time is printed too). The snapshot is what
the consumer thread does for a tick (candidates, feature rows, GPU holders).

    python benchmarks/bench_sidecar.py [--events 200000] [--ticks 200] [--model PATH]

Also the decider settling its copies with the requests routed between ticks, per request
(``feedback``: the outcome feedback and the ledger's claims), against looking up every block
of every request.

Goals (issue 6): ingestion >= 100,000 KV events/s on one core; tick <= 2 ms p99.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from kvcast.features.config import FeatureConfig
from kvcast.features.events import BlockRemoved, BlockStored, RequestArrived
from kvcast.features.online.state import FeatureState
from kvcast.features.spec import FeatureSpec
from kvcast.predictor.cluster_view import ChainCandidates
from kvcast.predictor.decider import Decider
from kvcast.predictor.model_meta import ModelMeta
from kvcast.serving.kv_events import decode_batch, encode_batch
from kvcast.serving.sidecar.config import SidecarConfig
from kvcast.serving.sidecar.consumer import StateKeeper
from kvcast.serving.sidecar.event_queue import EventQueue
from kvcast.serving.sidecar.live_view import LiveView
from kvcast.serving.sidecar.model_slot import ModelSlot
from kvcast.serving.sidecar.node_loads import NodeLoads
from kvcast.serving.sidecar.recent_chains import RecentChains
from kvcast.serving.sidecar.replicas import ReplicaTracker
from kvcast.serving.sidecar.tick_input import TickInput, snapshot

NODES, CHAINS, DEPTH, BATCH = 8, 128, 8, 32
ARRIVALS_PER_TICK = 4  # a 250 ms tick at 16 requests/s: each tick sees new requests


def ms(xs: list[float]) -> dict[str, float]:
    """p50, p99 and least of timings in seconds, in milliseconds."""
    p50, p99 = np.percentile(xs, [50, 99]) * 1e3
    return {"p50": float(p50), "p99": float(p99), "min": float(np.min(xs) * 1e3)}


def cpu(fn: Callable[[], Any], repeat: int = 5) -> float:
    """Least CPU time of ``repeat`` calls of ``fn``."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def payloads(n_events: int, seed: int = 0) -> tuple[list[bytes], int]:
    rng = random.Random(seed)
    out, made, ts, live = [], 0, 1.7e12, []
    while made < n_events:
        events = []
        for _ in range(BATCH):
            if live and rng.random() < 1 / 3:
                k = min(len(live), rng.choice((1, 2)))
                events.append(BlockRemoved(0.0, 0, tuple(live.pop() for _ in range(k))))
            else:
                hashes = tuple(rng.getrandbits(64) for _ in range(rng.choice((1, 2, 3))))
                live.extend(hashes)
                events.append(BlockStored(0.0, 0, hashes, None, 16))
        ts += 5.0
        out.append(encode_batch(events, ts_ms=ts))
        made += len(events)
    return out, made


def keeper_for(cfg: FeatureConfig) -> StateKeeper:
    chains = RecentChains(120_000.0, 256, cfg.block_tokens)
    loads = NodeLoads(cfg.nodes, cfg.prefill, 60.0)
    return StateKeeper(FeatureState(cfg), EventQueue(1 << 20), chains, ReplicaTracker(), loads)


def _publisher(data: list[bytes], endpoint: Any, go: Any, done: Any) -> None:
    """Child process: an engine's PUB socket; probes until ``go``, then every payload."""
    from kvcast.serving.kv_events import KvEventPublisher

    with KvEventPublisher("tcp://127.0.0.1:*", hwm=1 << 20) as pub:
        endpoint.put(pub.endpoint)
        probe = encode_batch([], ts_ms=1.0)
        while not go.wait(0.01):
            pub.publish(probe)
        for p in data:
            pub.publish(p)
        pub.flush(60.0)
        done.wait(120.0)


def over_zmq(data: list[bytes], n: int) -> dict[str, float]:
    """End to end: a publisher process -> the sidecar's engine feed thread -> its queue -> its
    consumer thread -> the feature state. Wall time from the first payload to the last event
    applied, and this process's CPU time meanwhile (feed, consumer and ZMQ's I/O thread)."""
    import multiprocessing as mp

    from kvcast.serving.sidecar.zmq_ingest import EngineFeed

    ctx = mp.get_context("spawn")
    endpoint, go, done = ctx.Queue(), ctx.Event(), ctx.Event()
    child = ctx.Process(target=_publisher, args=(data, endpoint, go, done), daemon=True)
    child.start()
    keeper = keeper_for(FeatureConfig(nodes=NODES))
    feed = EngineFeed(0, "bench", endpoint.get(timeout=60), keeper.queue, hwm=1 << 20)
    keeper.start()
    feed.start()
    try:
        while feed.counters.received == 0:
            time.sleep(0.01)
        time.sleep(0.1)
        w0, c0 = time.perf_counter(), time.process_time()
        go.set()
        while keeper.applied < n:
            time.sleep(0.02)
        wall, cpu_s = time.perf_counter() - w0, time.process_time() - c0
    finally:
        done.set()
        feed.stop()
        keeper.stop()
        child.join(10)
    return {"zmq_events_per_wall_s": n / wall, "zmq_events_per_cpu_s": n / cpu_s,
            "zmq_dropped": keeper.queue.dropped}  # fmt: skip


def ingestion(n_events: int) -> dict[str, float]:
    data, n = payloads(n_events)
    cfg = FeatureConfig(nodes=NODES)

    def sidecar_path() -> None:
        keeper = keeper_for(cfg)
        q = keeper.queue
        for i, p in enumerate(data):
            q.put(decode_batch(p, node=i % NODES).events, "zmq")
            if len(q) >= 1024:
                for batch in q.get(1024, 0.0):
                    keeper.apply(batch)
        for batch in q.get(1 << 30, 0.0):
            keeper.apply(batch)

    decoded = [decode_batch(p, node=i % NODES).events for i, p in enumerate(data)]

    def update_only() -> None:
        state = FeatureState(cfg)
        for events in decoded:
            for e in events:
                state.update(e)

    raw = msgspec.msgpack.Decoder()

    def decode_only(decode: Callable[[bytes], Any]) -> None:
        for p in data:  # results dropped, as the sidecar drops events once applied
            decode(p)

    t_side = cpu(sidecar_path)
    return {
        "events": n,
        "sidecar_events_per_s": n / t_side,
        "sidecar_us_per_event": t_side / n * 1e6,
        **over_zmq(data, n),
        "baseline_msgpack_decode_events_per_s": n / cpu(lambda: decode_only(raw.decode)),
        "baseline_decode_batch_events_per_s": n
        / cpu(lambda: decode_only(lambda p: decode_batch(p, node=0))),
        "baseline_feature_update_events_per_s": n / cpu(update_only),
    }


def logistic_model(path: Path, spec: FeatureSpec, seed: int = 0) -> Path:
    """A logistic score over every feature (NaN imputed as 0): the cost of a small dense model."""
    f = len(spec)
    w = np.random.default_rng(seed).normal(0, 1e-3, (f, 1)).astype(np.float32)
    w[spec.index("since_last_ms"), 0] = -1e-4
    consts = {"w": w, "b": np.array([2.0], np.float32), "zero": np.array(0.0, np.float32)}
    nodes = [
        helper.make_node("IsNaN", ["features"], ["nan"]),
        helper.make_node("Where", ["nan", "zero", "features"], ["x"]),
        helper.make_node("MatMul", ["x", "w"], ["z"]),
        helper.make_node("Add", ["z", "b"], ["zb"]),
        helper.make_node("Sigmoid", ["zb"], ["score"]),
    ]
    graph = helper.make_graph(
        nodes, "bench", [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["n", f])],
        [helper.make_tensor_value_info("score", TensorProto.FLOAT, ["n", 1])],
        [numpy_helper.from_array(v, k) for k, v in consts.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    for key, value in ModelMeta(kind="logistic-bench", spec=spec).to_props().items():
        model.metadata_props.add(key=key, value=value)
    onnx.save_model(model, str(path))
    return path


def telemetry_for(loads: NodeLoads) -> None:
    """Every node's telemetry: 80 GiB of HBM, 30 used; half of the nodes busy (6 queued)."""
    from kvcast.serving.agent.api_models import StateTotals, Telemetry

    gib = 1 << 30
    for node in range(loads.n):
        z = StateTotals(active=10 * gib, cached=20 * gib, speculative=0)
        t = Telemetry(
            node_id=str(node), capacity_bytes=80 * gib, used_bytes=30 * gib, free_bytes=50 * gib,
            speculative_quota_bytes=12 * gib, speculative_free_bytes=12 * gib, bytes=z,
            blocks=z, peak_used_bytes=0, peak_speculative_bytes=0, replications_in_flight=0,
            queue_depth=6 if node % 2 == 0 else 0, engines=[],
        )  # fmt: skip
        loads.note_telemetry(node, t)


def live_view(keeper: StateKeeper, cfg: FeatureConfig) -> LiveView:
    """The sidecar's view of ``keeper``'s nodes, with its default links."""
    sc = SidecarConfig.model_validate({"nodes": [{"name": f"n{i}"} for i in range(cfg.nodes)]})
    return LiveView(keeper.loads, sc.links, sc.node_names, sc.kv_block_bytes, cfg.block_tokens,
                    cfg.prefill)  # fmt: skip


def cluster(
    cfg: FeatureConfig,
) -> tuple[StateKeeper, LiveView, float, Callable[[float], list[RequestArrived]]]:
    """128 hot chains on 8 nodes after 4,096 arrivals; half the nodes busy. The last item:
    ``arrive(t)`` applies the requests the router sends between two ticks (ending at ``t``)."""
    keeper = keeper_for(cfg)
    rng = random.Random(1)
    chains = [tuple(rng.getrandbits(63) for _ in range(DEPTH)) for _ in range(CHAINS)]
    now = 1.7e12
    events: list[Any] = [BlockStored(now, i % NODES, c, None, 512) for i, c in enumerate(chains)]
    for r in range(4096):
        now += 10.0
        i = rng.randrange(CHAINS)
        tokens = DEPTH * cfg.block_tokens + 100
        events.append(RequestArrived(now, f"r{r}", i % NODES, f"t{i % 4}", f"s{i}", tokens, 50,
                                     chains[i]))  # fmt: skip
    keeper.apply(events)
    telemetry_for(keeper.loads)
    view = live_view(keeper, cfg)

    def arrive(t: float) -> list[RequestArrived]:
        batch = [
            RequestArrived(t - 0.5 + 0.1 * j, f"t{t}-{j}", (i := rng.randrange(CHAINS)) % NODES,
                           f"t{i % 4}", f"s{i}", tokens, 50, chains[i])
            for j in range(ARRIVALS_PER_TICK)
        ]  # fmt: skip
        keeper.apply(batch)
        keeper.idle()  # as the consumer does whenever its queue is empty: changed runs packed
        return batch

    return keeper, view, now, arrive


def ticks(n_ticks: int, model: str | None) -> dict[str, Any]:
    cfg = FeatureConfig(nodes=NODES)
    keeper, view, now, arrive = cluster(cfg)
    slot = ModelSlot(keeper.state.spec)
    with tempfile.TemporaryDirectory() as tmp:
        slot.load(model or str(logistic_model(Path(tmp) / "m.onnx", keeper.state.spec)))
    scorer = slot.current.scorer  # type: ignore[union-attr]
    last_use: dict[int, float] = {}  # the recency baseline's state, fed by the same arrivals
    for _, chain in keeper.chains._seen:
        for b in chain:
            last_use[b] = now

    def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
        w, c = time.perf_counter(), time.thread_time()
        out = fn()
        return time.thread_time() - c, time.perf_counter() - w, out

    parts: dict[str, list[float]] = {
        k: [] for k in ("snapshot", "features", "scoring", "decide", "tick", "steady", "base")
    }
    walls, made, blocks = [], [], 0
    steady = Decider()  # the loop's own decider: its ledger remembers earlier ticks' copies
    for k in range(n_ticks):
        t = now + 250.0 * (k + 1)
        for ev in arrive(t):  # the recency baseline sees the same arrivals
            for b in ev.block_hashes:
                last_use[b] = ev.ts_ms
        c0, w0, inp = timed(lambda t=t: snapshot(keeper, t, 512))
        c1, w1, probs = timed(lambda inp=inp: scorer.score(inp.rows)[inp.where])
        c2, w2, cmds = timed(lambda inp=inp, p=probs, t=t: Decider().decide(
            inp.cands, p, view.view(t, inp.hbm, {}, inp.removals), inp.holders))  # fmt: skip
        blocks = len(inp.blocks)
        parts["snapshot"].append(c0)
        parts["features"].append(inp.features_s)
        parts["scoring"].append(c1)
        parts["decide"].append(c2)
        parts["tick"].append(c0 + c1 + c2)
        walls.append(w0 + w1 + w2)
        made.append(len(cmds))
        c3, _, _ = timed(lambda inp=inp, p=probs, t=t: steady.decide(
            inp.cands, p, view.view(t, inp.hbm, {}, inp.removals), inp.holders))  # fmt: skip
        parts["steady"].append(c0 + c1 + c3)

        def recency_tick(t: float = t, inp: TickInput = inp) -> None:
            cands: ChainCandidates = keeper.chains.candidates(t, 512)
            age = np.array([t - last_use.get(b, -np.inf) for c in cands.chains for b in c])
            gpu = keeper.state.residency.masks(inp.blocks)[0]
            hbm = {b: m for b, m in zip(inp.blocks, gpu, strict=True) if m}
            holders = np.asarray(gpu, dtype=np.int64)[inp.where]
            p = np.exp(-age / 30_000.0)
            Decider().decide(cands, p, view.view(t, hbm, {}, inp.removals), holders)

        parts["base"].append(timed(recency_tick)[0])

    return {
        "candidate_blocks": blocks,
        "ticks": n_ticks,
        "commands_per_tick": float(np.mean(made)),
        "model": slot.current.info.kind,  # type: ignore[union-attr]
        "tick_cpu_ms": ms(parts["tick"]),
        "tick_wall_ms": ms(walls),
        "tick_steady_ledger_cpu_ms": ms(parts["steady"]),
        "snapshot_cpu_ms": ms(parts["snapshot"]),
        "of_which_feature_rows_wall_ms": ms(parts["features"]),
        "scoring_cpu_ms": ms(parts["scoring"]),
        "view_and_decider_cpu_ms": ms(parts["decide"]),
        "baseline_recency_tick_cpu_ms": ms(parts["base"]),
    }


def routed_settle(repeat: int = 20) -> dict[str, float]:
    """The decider settling its copies with the routed requests (what each tick does for the
    requests since the last one, :meth:`Decider.observe_arrival`: the outcome feedback and
    the ledger's claims): 100 live copies at 20 depths, landed on the node the requests are
    routed to, 400 requests of 100 blocks that read none of them (the common case). Baseline:
    the same with the copies' depths unknown, i.e. every block of every request looked up."""
    from kvcast.predictor.budgets import Transfer

    rng = random.Random(2)
    chains = [tuple(rng.getrandbits(60) for _ in range(100)) for _ in range(500)]
    depths = [rng.randrange(10, 30) for _ in range(100)]

    def per_request(known: bool) -> float:
        d = Decider()
        for c, depth in zip(chains, depths, strict=False):
            d.feedback.watch(c[depth], 2, float("inf"), 0.2, 0, depth if known else -1)
            d.ledger.record(Transfer(0.0, 0.0, 0, 2, 1, c[: depth + 1]), float("inf"))
        d.ledger.settle(1.0)  # landed: claimable
        reqs = chains[100:]

        def settle() -> None:
            for r in reqs:
                d.observe_arrival(2, r, 1.0)

        return cpu(lambda: [settle() for _ in range(repeat)]) / (repeat * len(reqs)) * 1e6

    return {"routed_settle_us_per_request": per_request(True),
            "baseline_every_block_looked_up_us": per_request(False)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--ticks", type=int, default=200)
    ap.add_argument("--model", default=None, help="an ONNX model (default: a logistic graph)")
    args = ap.parse_args()
    out = {"ingestion": ingestion(args.events), "tick": ticks(args.ticks, args.model),
           "feedback": routed_settle()}  # fmt: skip
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
