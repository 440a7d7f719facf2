"""Real ZMQ: vLLM-format KV events (both encodings, int and bytes hashes) published on a PUB
socket reach the sidecar's feature state and its block-location endpoint; a gap is recovered
through the replay socket and counted in /metrics."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from sidecar_harness import open_sidecar, settle, sidecar_config

zmq = pytest.importorskip("zmq")

from kvcast.features.events import BlockRemoved, BlockStored  # noqa: E402
from kvcast.serving.kv_events import KvEventPublisher  # noqa: E402

LOOPBACK = "tcp://127.0.0.1:*"


async def _join(sc, pub: KvEventPublisher, timeout_s: float = 10.0) -> None:
    """Publish empty probe batches until the sidecar's subscriber receives one (ZMQ's slow
    joiner drops what a PUB sends before the SUB is connected)."""
    feed = sc.feeds[0]
    async with asyncio.timeout(timeout_s):
        while feed.counters.received == 0:
            pub.publish_events([], ts_ms=1.0)
            await asyncio.sleep(0.02)
    assert pub.flush()


async def _until(predicate, timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


def test_vllm_events_in_every_encoding_reach_the_feature_state_and_the_api(tmp_path, run):
    ctx = zmq.Context()
    pub = KvEventPublisher(LOOPBACK, LOOPBACK, context=ctx)

    async def main() -> None:
        nodes = [{"name": "node-a", "engine": pub.endpoint, "replay": pub.replay_endpoint},
                 {"name": "node-b"}]  # fmt: skip
        async with open_sidecar(sidecar_config(tmp_path, nodes=nodes)) as (sc, client):
            await _join(sc, pub)
            combos = list(itertools.product(("array", "map"), ("array", "map"), ("int", "bytes")))
            for i, (enc, benc, hf) in enumerate(combos):
                hashes = (1000 + 10 * i, 1001 + 10 * i)
                ev = BlockStored(0.0, 0, hashes, None, 16)
                pub.publish_events([ev], ts_ms=5_000.0 + i, encoding=enc, batch_encoding=benc,
                                   hash_format=hf)  # fmt: skip
            pub.publish_events([BlockRemoved(0.0, 0, (1001,))], ts_ms=6_000.0, encoding="array")
            await _until(lambda: sc.queue.accepted["zmq"] >= len(combos) + 1)
            await settle(sc)
            held = sc.state.residency.gpu[0]
            expected = {1000 + 10 * i + k for i in range(len(combos)) for k in (0, 1)} - {1001}
            assert held == expected
            for h in (1000, 1011, 1070, 1071):
                body = (await client.get(f"/v1/blocks/{h}")).json()
                assert body["gpu"] == ["node-a"], (h, body)
            assert (await client.get("/v1/blocks/1001")).status_code == 404
            assert sc.feeds[0].counters.decode_errors == 0

    try:
        run(main())
    finally:
        pub.close()
        ctx.destroy(linger=0)


def test_a_sequence_gap_is_recovered_through_the_replay_socket_and_counted(tmp_path, run):
    ctx = zmq.Context()
    pub = KvEventPublisher(LOOPBACK, LOOPBACK, context=ctx)

    async def main() -> None:
        nodes = [{"name": "node-a", "engine": pub.endpoint, "replay": pub.replay_endpoint},
                 {"name": "node-b"}]  # fmt: skip
        async with open_sidecar(sidecar_config(tmp_path, nodes=nodes)) as (sc, client):
            await _join(sc, pub)
            for i in range(4):
                ev = BlockStored(0.0, 0, (2000 + i,), None, 16)
                pub.publish_events([ev], ts_ms=9_000.0 + i, deliver=i not in (1, 2))
            await _until(lambda: sc.queue.accepted["zmq"] >= 4)
            await settle(sc)
            assert {2000, 2001, 2002, 2003} <= sc.state.residency.gpu[0]
            text = (await client.get("/metrics")).text
            assert 'kvcast_sidecar_kv_gaps_total{node="node-a"} 1.0' in text
            assert 'kvcast_sidecar_kv_replayed_total{node="node-a"} 2.0' in text
            assert 'kvcast_sidecar_events_in_total{source="zmq"} 4.0' in text

    try:
        run(main())
    finally:
        pub.close()
        ctx.destroy(linger=0)
