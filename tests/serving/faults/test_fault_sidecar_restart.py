"""The sidecar process killed and started again beside two real agents and a vLLM-like engine
publisher: the new sidecar rebuilds where every block lives from the agents' inventories (the
replica it had placed on b, the blocks a's engine stored into a) and from the engine's replay
socket (a block only the engine announced), is ready within seconds, and, when the same hot
chain arrives again, sends no duplicate transfer: b already holds it."""

from __future__ import annotations

import asyncio
import secrets
import signal
import time

import httpx
import pytest
from agent_blocks import inventory, put_blocks
from faults_harness import (
    CHAIN_BLOCKS,
    arrive,
    busy,
    chain,
    metrics,
    sidecar_yaml,
    token_env,
    until,
)
from serve_processes import AGENT_READY, SIDECAR_READY, Service, start, start_agent

from kvcast.features.events import BlockStored

zmq = pytest.importorskip("zmq")
from kvcast.serving.kv_events import KvEventPublisher  # noqa: E402

S = "kvcast_sidecar_"
ENGINE_ONLY = 777  # a block a's engine announced and never stored into its agent
READY_WITHIN_S = 5.0  # from the ready line to /readyz 200 with locations rebuilt


def test_a_restarted_sidecar_rebuilds_locations_and_sends_no_duplicate(
    tmp_path, run, procs, model_path
) -> None:
    token = secrets.token_hex(16)
    env, auth = token_env(token), {"Authorization": f"Bearer {token}"}
    procs += [start_agent("node-a", env), start_agent("node-b", env)]
    for p in procs:
        p.wait_ready(AGENT_READY)
    a, b = procs
    ctx = zmq.Context()
    pub = KvEventPublisher("tcp://127.0.0.1:*", "tcp://127.0.0.1:*", context=ctx)
    nodes = [{"name": "node-a", "agent": a.http, "engine": pub.endpoint,
              "replay": pub.replay_endpoint}, {"name": "node-b", "agent": b.http}]  # fmt: skip
    cfg = sidecar_yaml(tmp_path, nodes, model_path)
    hot = chain(1)
    try:
        first = start(["serve", "sidecar", "--config", cfg], env)
        procs.append(first)
        first.wait_ready(SIDECAR_READY)
        run(_first_life(first.http, a, b, pub, hot, auth), timeout=30.0)
        first.proc.send_signal(signal.SIGKILL)
        first.wait(5.0)

        second = start(["serve", "sidecar", "--config", cfg], env)
        procs.append(second)
        second.wait_ready(SIDECAR_READY)
        run(_second_life(second, b, hot, auth), timeout=30.0)
        assert second.stop(signal.SIGTERM) == 0, "".join(second.log)
    finally:
        pub.close()
        ctx.term()
    assert not any("HTTP Request" in line for line in second.log), "httpx logs every call"
    for p in (a, b):
        assert p.stop(signal.SIGTERM) == 0, "".join(p.log)


async def _first_life(
    side: str, a: Service, b: Service, pub: KvEventPublisher, hot: list[int], auth: dict
) -> None:
    async with httpx.AsyncClient(timeout=10.0) as http:
        await put_blocks(http, a.http, hot, auth)

        async def joined() -> bool:  # ZMQ's slow joiner: probe until the sidecar hears one
            pub.publish_events([], ts_ms=1.0)
            m = await metrics(http, side)
            return m.get(f"{S}kv_received_total{{node=node-a}}", 0) > 0

        await until(joined, 10.0, "the sidecar subscribed to a's engine")
        pub.publish_events(
            [
                BlockStored(0.0, 0, tuple(hot), None, 512),
                BlockStored(0.0, 0, (ENGINE_ONLY,), None, 512),
            ],
            ts_ms=2.0,
        )
        await busy(http, a.http, auth)
        await asyncio.sleep(0.5)  # the next telemetry poll carries a's queue depth
        await arrive(http, side, "node-a", [hot], auth, tag="first")

        async def copied() -> bool:
            done = (await metrics(http, side))[f"{S}replications_done_total"]
            return done == 1 and len(await inventory(http, b.http, auth)) == CHAIN_BLOCKS

        await until(copied, 15.0, "the hot chain copied to b")


async def _second_life(side: Service, b: Service, hot: list[int], auth: dict) -> None:
    t0 = time.monotonic()
    async with httpx.AsyncClient(base_url=side.http, timeout=10.0) as http:

        async def ready() -> bool:
            return (await http.get("/readyz")).status_code == 200

        await until(ready, READY_WITHIN_S, "the restarted sidecar is ready")
        print(f"restarted sidecar ready {time.monotonic() - t0:.2f} s after its ready line")
        m = await metrics(http, side.http)
        assert m[f"{S}recovered_block_locations"] == 2 * CHAIN_BLOCKS  # a's 8 and b's 8
        assert m[f"{S}recovered_replicas"] == CHAIN_BLOCKS
        assert m[f"{S}recovery_seconds"] < 2.0
        where = (await http.get(f"/v1/blocks/{hot[0]}", headers=auth)).json()
        assert where["gpu"] == ["node-a", "node-b"] and where["replicas"] == ["node-b"], where

        async def replayed() -> bool:  # the engine's history, from its replay socket
            r = await http.get(f"/v1/blocks/{ENGINE_ONLY}", headers=auth)
            return r.status_code == 200 and r.json()["gpu"] == ["node-a"]

        await until(replayed, 5.0, "the engine-only block located through the replay socket")

        pulls_before = (await metrics(http, b.http))["kvcast_agent_pulls_total"]
        await arrive(http, side.http, "node-a", [hot], auth, tag="second")
        ticks = (await metrics(http, side.http))[f"{S}ticks_total"]

        async def ten_ticks() -> bool:
            return (await metrics(http, side.http))[f"{S}ticks_total"] >= ticks + 10

        await until(ten_ticks, 10.0, "ten decision ticks after the arrival")
        m = await metrics(http, side.http)
        assert m[f"{S}replications_issued_total"] == 0, "a duplicate transfer was issued"
        assert m.get(f"{S}decisions_total{{kind=replicate}}", 0) == 0
        assert (await metrics(http, b.http))["kvcast_agent_pulls_total"] == pulls_before
        assert m[f"{S}kv_caught_up_total{{node=node-a}}"] > 0
