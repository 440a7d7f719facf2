"""The sidecar's "replication failed" path, with real processes: the source agent is frozen
(SIGSTOP) before the sidecar commands b to copy a hot chain from it, so b cancels the pull at
its deadline and reports it. The sidecar counts the failure, records it in its event stream,
drops the command with the reason (no other node holds the chain) and never counts b as a
location of the chain: not in the feature state's residency, not as a replica."""

from __future__ import annotations

import asyncio
import secrets
import signal

import httpx
from agent_blocks import inventory, put_blocks
from faults_harness import announce, arrive, busy, chain, metrics, sidecar_yaml, token_env, until
from serve_processes import AGENT_READY, SIDECAR_READY, start, start_agent

S = "kvcast_sidecar_"


def test_a_cancelled_pull_is_counted_dropped_and_never_a_location(
    tmp_path, run, procs, model_path
) -> None:
    token = secrets.token_hex(16)
    env, auth = token_env(token), {"Authorization": f"Bearer {token}"}
    procs += [start_agent("node-a", env), start_agent("node-b", env)]
    for p in procs:
        p.wait_ready(AGENT_READY)
    a, b = procs
    nodes = [{"name": "node-a", "agent": a.http}, {"name": "node-b", "agent": b.http}]
    deadline = {"min_deadline_s": 1.0, "replicate_deadline_s": 1.0}
    sidecar = start(["serve", "sidecar", "--config",
                     sidecar_yaml(tmp_path, nodes, model_path, agents=deadline)], env)  # fmt: skip
    procs.append(sidecar)
    sidecar.wait_ready(SIDECAR_READY)
    hot = chain(1)

    async def main() -> None:
        side = sidecar.http
        async with httpx.AsyncClient(timeout=10.0) as http:
            await put_blocks(http, a.http, hot, auth)
            await announce(http, side, "node-a", [hot], auth)
            await busy(http, a.http, auth)
            await asyncio.sleep(0.6)  # telemetry polls carry a's queue and transfer address
            a.proc.send_signal(signal.SIGSTOP)
            await arrive(http, side, "node-a", [hot], auth)

            async def settled() -> list[dict]:
                r = await http.get(
                    f"{side}/v1/decisions", params={"kind": "replicate"}, headers=auth
                )
                return [d for d in r.json()["decisions"] if d["status"] in ("done", "dropped")]

            async def any_settled() -> bool:
                return bool(await settled())

            await until(any_settled, 10.0, "the replication settled")
            (d,) = await settled()
            ms = await metrics(http, side)
            where = [(await http.get(f"{side}/v1/blocks/{h}", headers=auth)).json() for h in hot]
            held = await inventory(http, b.http, auth)
            mb = await metrics(http, b.http)
        a.proc.send_signal(signal.SIGCONT)

        assert (d["source"], d["target"], d["status"]) == ("node-a", "node-b", "dropped"), d
        assert "pull deadline_exceeded" in d["detail"], d
        assert "no other node holds the chain" in d["detail"], d
        assert ms[f"{S}replications_issued_total"] == 1
        assert ms[f"{S}replications_failed_total{{reason=pull}}"] == 1
        assert ms[f"{S}commands_dropped_total{{reason=failed}}"] == 1
        assert ms[f"{S}replications_done_total"] == 0
        assert ms[f"{S}replicas_placed_total"] == ms[f"{S}replicas_live"] == 0
        assert ms[f"{S}events_in_total{{source=executor}}"] == 1  # the failure, ok=False
        assert all(w["gpu"] == ["node-a"] and w["replicas"] == [] for w in where), where
        assert held == {}
        assert mb["kvcast_agent_deadline_cancellations_total"] == 1
        assert any("dropped (failed)" in line for line in sidecar.log), "".join(sidecar.log)

    run(main(), timeout=30.0)
    for p in procs:
        p.proc.send_signal(signal.SIGTERM)
    for p in procs:
        assert p.wait() == 0, "".join(p.log)
