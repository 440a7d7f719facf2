"""A source agent SIGKILLed mid-transfer, with a real sidecar process and three real agents.

Node a holds chains 1 and 2, node c chain 1 only; both are busy, so the sidecar copies both
chains to the idle node b, from a (the config makes the a-b link the cheapest). b pulls
through a slow link (4 MiB/s for 24 MiB, twice what the kernel buffers between a and b hold)
into a preallocated receive pool; while both pulls are in flight, a is killed. Then: chain 1
is retried from c and lands whole; chain 2, held nowhere else, ends with its reason logged
(dropped when none of it landed, a partial copy otherwise); b holds only verified blocks
(every checksum is the source's: no partial block), its memory accounting and every
receive-pool slot are back to what its blocks hold (nothing leaked); the sidecar counts the
failures, marks a's agent down and never reports b as holding a block that did not land."""

from __future__ import annotations

import asyncio
import secrets
import signal

import httpx
from agent_blocks import inventory, put_blocks
from faults_harness import (
    announce,
    arrive,
    busy,
    metrics,
    sidecar_yaml,
    token_env,
    until,
    write_yaml,
)
from serve_processes import AGENT_READY, SIDECAR_READY, start, start_agent

S = "kvcast_sidecar_"
BLOCK, LENGTH = 1 << 20, 12  # 12 MiB a chain: about twice the kernel buffers between a and b
NAMES = ("node-a", "node-b", "node-c")


def test_a_source_killed_mid_transfer_leaves_no_partial_block_and_no_leak(
    tmp_path, run, procs, model_path
) -> None:
    token = secrets.token_hex(16)
    env, auth = token_env(token), {"Authorization": f"Bearer {token}"}
    slow = write_yaml(tmp_path / "b.yaml", {
        "link_bytes_per_s": 4 << 20, "link_burst_bytes": BLOCK, "pool_slot_bytes": BLOCK,
    })  # fmt: skip
    procs += [start_agent("node-a", env),
              start_agent("node-b", env, "--config", slow, "--capacity", "48MiB",
                          "--speculative-quota", "36MiB"),
              start_agent("node-c", env)]  # fmt: skip
    for p in procs:
        p.wait_ready(AGENT_READY)
    a, b, c = procs
    nodes = [{"name": n, "agent": p.http} for n, p in zip(NAMES, procs, strict=True)]
    cfg = sidecar_yaml(
        tmp_path, nodes, model_path, BLOCK,
        links={"pairs": [{"a": "node-a", "b": "node-b", "gbps": 400.0, "tier": 1}]},
        agents={"min_deadline_s": 8.0, "replicate_deadline_s": 10.0},
    )  # fmt: skip
    sidecar = start(["serve", "sidecar", "--config", cfg], env)
    procs.append(sidecar)
    sidecar.wait_ready(SIDECAR_READY)
    c1, c2 = ([(seed << 32) + i for i in range(LENGTH)] for seed in (1, 2))

    async def main() -> None:
        async with httpx.AsyncClient(timeout=10.0) as http:
            side = sidecar.http
            sums = await put_blocks(http, a.http, c1 + c2, auth, BLOCK)
            await put_blocks(http, c.http, c1, auth, BLOCK)

            async def agents_up() -> bool:
                m = await metrics(http, side)
                return all(m.get(f"{S}agent_up{{node={n}}}") == 1 for n in NAMES)

            await until(agents_up, 10.0, "the sidecar polled every agent")
            await announce(http, side, "node-a", [c1, c2], auth)
            await announce(http, side, "node-c", [c1], auth)
            for busy_node in (a, c):
                await busy(http, busy_node.http, auth)
            await asyncio.sleep(0.5)  # the next telemetry poll carries the queue depths
            await arrive(http, side, "node-a", [c1, c2], auth)
            await arrive(http, side, "node-c", [c1], auth)

            async def ours() -> dict[int, dict]:
                r = await http.get(
                    f"{side}/v1/decisions", params={"kind": "replicate"}, headers=auth
                )
                return {
                    d["block_hashes"][0]: d
                    for d in r.json()["decisions"]
                    if d["target"] == "node-b" and d["block_hashes"][0] in (c1[0], c2[0])
                }

            async def both_pulling() -> bool:
                t = (await http.get(f"{b.http}/v1/telemetry")).json()
                return t["replications_in_flight"] == 2

            await until(both_pulling, 10.0, "b pulls both chains")
            first = await ours()
            assert {d["source"] for d in first.values()} == {"node-a"}, first
            await asyncio.sleep(0.2)  # some blocks landed, one is half-received
            a.proc.send_signal(signal.SIGKILL)
            a.wait(5.0)

            async def settled() -> bool:
                return all(d["status"] in ("done", "dropped") for d in (await ours()).values())

            await until(settled, 20.0, "both decisions settled")
            d1, d2 = (await ours())[c1[0]], (await ours())[c2[0]]
            held = await inventory(http, b.http, auth)
            tel = (await http.get(f"{b.http}/v1/telemetry")).json()

            async def pool_back() -> bool:
                m = await metrics(http, b.http)
                free, slots = m["kvcast_agent_pool_free_slots"], m["kvcast_agent_pool_slots"]
                return free == slots - len(held)

            await until(pool_back, 5.0, "every receive slot not holding a block is free again")
            mb = await metrics(http, b.http)

            async def a_down() -> bool:
                return (await metrics(http, side))[f"{S}agent_up{{node=node-a}}"] == 0

            await until(a_down, 5.0, "the sidecar marks a's agent down")
            ms = await metrics(http, side)
            where = {h: (await http.get(f"{side}/v1/blocks/{h}", headers=auth)).json()
                     for h in c1 + c2}  # fmt: skip

        # chain 1: retried from c, whole on b
        assert (d1["status"], d1["attempts"]) == ("done", 2), d1
        assert set(c1) <= set(held)
        # chain 2: a reason, and dropped exactly when none of it landed
        landed2 = [h for h in c2 if h in held]
        print(f"chain 2: {len(landed2)} of {len(c2)} blocks landed before the kill; {d2['detail']}")
        assert "no other node holds the chain" in d2["detail"], d2
        assert d2["status"] == ("done" if landed2 else "dropped"), (d2, landed2)
        assert len(landed2) < len(c2), "a was killed before chain 2 could finish"
        # b: only verified blocks, memory back to what they hold, no receive buffer leaked
        assert set(held) <= set(c1 + c2)
        assert {h: x["checksum"] for h, x in held.items()} == {h: sums[h] for h in held}
        assert tel["used_bytes"] == tel["bytes"]["speculative"] == len(held) * BLOCK
        assert mb["kvcast_agent_pool_fallbacks_total"] == 0
        assert mb["kvcast_agent_checksum_failures_total"] == 0
        # the sidecar: failures counted, a down, b never reported holding what did not land
        assert ms[f"{S}replications_failed_total{{reason=pull}}"] == 2
        assert ms[f"{S}replications_retried_total"] == 1
        assert ms.get(f"{S}commands_dropped_total{{reason=failed}}", 0) == (0 if landed2 else 1)
        for h in c1 + c2:
            on_b = "node-b" in where[h]["gpu"] or "node-b" in where[h]["replicas"]
            assert on_b == (h in held), (h, where[h])
        logged = "partial copy" if landed2 else "dropped (failed)"
        assert any(logged in line and d2["id"] in line for line in sidecar.log), sidecar.log

    run(main(), timeout=60.0)
    for p in (sidecar, b, c):
        p.proc.send_signal(signal.SIGTERM)
    for p in (sidecar, b, c):
        assert p.wait() == 0, "".join(p.log)
