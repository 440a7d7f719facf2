"""A stalled peer (a real agent process frozen with SIGSTOP: its kernel still accepts the
connection, nothing answers): the pull from it is cancelled at its deadline and reported as
such, nothing of it is stored, and a pull from a healthy peer running at the same time keeps
its bandwidth (it takes about as long as the same pull alone, measured first in this run)."""

from __future__ import annotations

import asyncio
import secrets
import signal

import httpx
from agent_blocks import BLOCK, TENANT, inventory, put_blocks
from faults_harness import CHAIN_BLOCKS, chain, metrics, token_env, write_yaml
from serve_processes import AGENT_READY, start_agent

RATE = 2 << 20  # the target's per-link limit, bytes/s: a chain takes about 1 s
STALL_DEADLINE_S = 1.5


def test_a_stalled_peer_is_cancelled_at_its_deadline_and_others_keep_their_bandwidth(
    tmp_path, run, procs
) -> None:
    token = secrets.token_hex(16)
    env, auth = token_env(token), {"Authorization": f"Bearer {token}"}
    limits = write_yaml(tmp_path / "b.yaml", {"link_bytes_per_s": RATE,
                                              "link_burst_bytes": BLOCK})  # fmt: skip
    procs += [start_agent("node-a", env), start_agent("node-s", env),
              start_agent("node-b", env, "--config", limits)]  # fmt: skip
    (a, a_tx), (s, s_tx), (b, _) = [(p, p.wait_ready(AGENT_READY).group(3)) for p in procs]
    a1, a2, stuck = chain(1), chain(2), chain(3)

    async def pull(http: httpx.AsyncClient, cid: str, source: str, hashes: list[int],
                   deadline_s: float) -> dict:  # fmt: skip
        body = {"command_id": cid, "source": source, "tenant": TENANT, "block_hashes": hashes,
                "deadline_s": deadline_s}  # fmt: skip
        r = await http.post(f"{b.http}/v1/replicate", json=body, headers=auth)
        assert r.status_code == 200, r.text
        return r.json()

    async def main() -> None:
        async with httpx.AsyncClient(timeout=30.0) as http:
            sums = await put_blocks(http, a.http, a1 + a2, auth)
            await put_blocks(http, s.http, stuck, auth)
            alone = await pull(http, "alone", a_tx, a1, 10.0)
            assert alone["status"] == "ok", alone

            s.proc.send_signal(signal.SIGSTOP)
            try:
                stalled, beside = await asyncio.gather(
                    pull(http, "stalled", s_tx, stuck, STALL_DEADLINE_S),
                    pull(http, "beside", a_tx, a2, 10.0),
                )
            finally:
                s.proc.send_signal(signal.SIGCONT)
            held = await inventory(http, b.http, auth)
            tel = (await http.get(f"{b.http}/v1/telemetry")).json()
            mb = await metrics(http, b.http)

        assert stalled["status"] == "deadline_exceeded", stalled
        assert stalled["committed"] == [] and sorted(stalled["incomplete"]) == sorted(stuck)
        assert STALL_DEADLINE_S <= stalled["elapsed_s"] < STALL_DEADLINE_S + 0.75, stalled
        assert beside["status"] == "ok" and sorted(beside["committed"]) == sorted(a2), beside
        # same bytes on the same limited link: within half again of the pull alone
        assert beside["elapsed_s"] < 1.5 * alone["elapsed_s"] + 0.2, (alone, beside)
        assert {h: x["checksum"] for h, x in held.items()} == sums  # nothing of the stall
        assert tel["used_bytes"] == tel["bytes"]["speculative"] == 2 * CHAIN_BLOCKS * BLOCK
        assert mb["kvcast_agent_deadline_cancellations_total"] == 1
        failed = "kvcast_agent_commands_failed_total{command=replicate,outcome=deadline_exceeded}"
        assert mb[failed] == 1

    run(main(), timeout=45.0)
    for p in procs:
        p.proc.send_signal(signal.SIGTERM)
    for p in procs:
        assert p.wait() == 0, "".join(p.log)
