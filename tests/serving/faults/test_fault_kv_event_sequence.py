"""A real ``kvcast serve sidecar`` process fed by a real ZMQ publisher that behaves like vLLM's
(PUB + replay ROUTER): a batch the PUB socket drops is a gap, and a publisher restart
(sequence back to 0) is a new engine; both are detected, counted in ``/metrics`` and recovered
through the replay socket, as ``GET /v1/blocks`` then shows: the dropped batch's block is
located, the restarted engine's old blocks are gone and its missed first batch is back."""

from __future__ import annotations

import os
import signal

import httpx
import pytest
from faults_harness import metrics, until, write_yaml
from serve_processes import SIDECAR_READY, start

from kvcast.features.events import BlockStored

zmq = pytest.importorskip("zmq")
from kvcast.serving.kv_events import KvEventPublisher  # noqa: E402

LOOPBACK = "tcp://127.0.0.1:*"
KV = "kvcast_sidecar_kv_"


def stored(*hashes: int) -> list[BlockStored]:
    return [BlockStored(0.0, 0, hashes, None, 16)]


def test_a_gap_and_a_publisher_restart_are_counted_and_recovered(tmp_path, run, procs) -> None:
    ctx = zmq.Context()
    pub = KvEventPublisher(LOOPBACK, LOOPBACK, context=ctx)
    try:
        nodes = [{"name": "node-a", "engine": pub.endpoint, "replay": pub.replay_endpoint},
                 {"name": "node-b"}]  # fmt: skip
        cfg = write_yaml(tmp_path / "sidecar.yaml", {
            "listen": "127.0.0.1:0", "nodes": nodes, "decision_log": {"path": None},
        })  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN"}
        procs.append(start(["serve", "sidecar", "--config", cfg], env))
        sidecar = procs[0]
        sidecar.wait_ready(SIDECAR_READY)
        run(_play(pub, sidecar.http), timeout=30.0)
        assert sidecar.stop(signal.SIGTERM) == 0, "".join(sidecar.log)
    finally:
        pub.close()
        ctx.term()


async def _where(http: httpx.AsyncClient, h: int) -> list[str] | None:
    r = await http.get(f"/v1/blocks/{h}")
    return r.json()["gpu"] if r.status_code == 200 else None


async def _play(pub: KvEventPublisher, base: str) -> None:
    ts = iter(range(10_000, 1_000_000, 10))
    async with httpx.AsyncClient(base_url=base, timeout=10.0) as http:

        async def joined() -> bool:  # ZMQ's slow joiner: probe until the sidecar hears one
            pub.publish_events([], ts_ms=float(next(ts)))
            m = await metrics(http, base)
            return m.get(f"{KV}received_total{{node=node-a}}", 0) > 0

        await until(joined, 10.0, "the sidecar subscribed")
        before = await metrics(http, base)
        assert before[f"{KV}gaps_total{{node=node-a}}"] == 0

        pub.publish_events(stored(101), ts_ms=float(next(ts)))
        pub.publish_events(stored(102), ts_ms=float(next(ts)), deliver=False)  # dropped
        pub.publish_events(stored(103), ts_ms=float(next(ts)))
        assert pub.flush()

        async def located(h: int) -> bool:
            return await _where(http, h) == ["node-a"]

        for h in (101, 102, 103):
            await until(lambda h=h: located(h), 10.0, f"block {h} located on node-a")
        gap = await metrics(http, base)
        assert gap[f"{KV}gaps_total{{node=node-a}}"] == 1
        assert gap[f"{KV}missed_batches_total{{node=node-a}}"] == 1
        assert gap[f"{KV}replayed_total{{node=node-a}}"] == 1

        pub.restart()  # a new engine process: numbering from 0, empty cache
        pub.publish_events(stored(201), ts_ms=float(next(ts)), deliver=False)  # seq 0, dropped
        pub.publish_events(stored(202), ts_ms=float(next(ts)))  # seq 1
        assert pub.flush()
        for h in (201, 202):
            await until(lambda h=h: located(h), 10.0, f"block {h} located after the restart")
        for h in (101, 102, 103):  # the old engine's blocks died with it
            await until(lambda h=h: _gone(http, h), 10.0, f"block {h} cleared")
        after = await metrics(http, base)
        assert after[f"{KV}restarts_total{{node=node-a}}"] == 1
        assert after[f"{KV}gaps_total{{node=node-a}}"] == 1
        assert after[f"{KV}missed_batches_total{{node=node-a}}"] == 2
        assert after[f"{KV}replayed_total{{node=node-a}}"] == 2
        assert after[f"{KV}replay_failures_total{{node=node-a}}"] == 0
        assert after[f"{KV}decode_errors_total{{node=node-a}}"] == 0


async def _gone(http: httpx.AsyncClient, h: int) -> bool:
    return await _where(http, h) is None
