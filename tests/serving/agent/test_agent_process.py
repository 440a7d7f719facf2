"""Two real ``kvcast serve agent`` processes on loopback: B replicates A's seeded blocks when
commanded over HTTP (token required), the checksums and metrics of both agree, and SIGINT /
SIGTERM stop each cleanly with exit status 0."""

from __future__ import annotations

import os
import secrets
import signal
from collections.abc import Iterator

import httpx
import pytest
from serve_processes import AGENT_READY, Service, start_agent

from kvcast.serving.cluster.summary import parse_metrics

BLOCK_BYTES, SEEDED = 256 << 10, 8


@pytest.fixture
def agents() -> Iterator[list[Service]]:
    started: list[Service] = []
    yield started
    for agent in started:  # only what this test started, by its own handle
        agent.kill()


def metrics(client: httpx.Client, base: str) -> dict[str, float]:
    return parse_metrics(client.get(f"{base}/metrics").text)


def test_two_agent_processes_replicate_verified_blocks_and_stop_cleanly(agents) -> None:
    token = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN"} | {"KVCAST_TOKEN": token}
    seed = ["--seed-blocks", str(SEEDED), "--seed-tenant", "acme",
            "--seed-block-bytes", str(BLOCK_BYTES)]  # fmt: skip
    agents += [start_agent("node-a", env, *seed), start_agent("node-b", env)]
    a, b = agents
    transfer_a = a.wait_ready(AGENT_READY).group(3)
    b.wait_ready(AGENT_READY)
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=10.0) as http:
        A, B = a.http, b.http
        source = {x["block_hash"]: x for x in http.get(f"{A}/v1/inventory", headers=auth).json()
                  ["blocks"]}  # fmt: skip
        assert len(source) == SEEDED and {x["tenant"] for x in source.values()} == {"acme"}
        command = {"command_id": "rep-1", "source": transfer_a, "tenant": "acme",
                   "block_hashes": list(source), "deadline_s": 10.0, "ttl_s": 120.0}  # fmt: skip
        refused = http.post(f"{B}/v1/replicate", json=command)
        assert refused.status_code == 401
        result = http.post(f"{B}/v1/replicate", json=command, headers=auth).json()
        assert result["status"] == "ok", result
        assert sorted(result["committed"]) == sorted(source)
        assert result["bytes_committed"] == SEEDED * BLOCK_BYTES

        held = http.get(f"{B}/v1/inventory", headers=auth).json()["blocks"]
        assert {x["block_hash"]: x["checksum"] for x in held} == {
            h: x["checksum"] for h, x in source.items()
        }
        assert {x["state"] for x in held} == {"speculative"}
        telemetry = http.get(f"{B}/v1/telemetry").json()
        assert telemetry["bytes"]["speculative"] == SEEDED * BLOCK_BYTES
        assert telemetry["blocks"]["speculative"] == SEEDED
        assert telemetry["node_id"] == "node-b"

        ma, mb = metrics(http, A), metrics(http, B)
        assert mb["kvcast_agent_bytes_pulled_total"] == ma["kvcast_agent_bytes_served_total"]
        assert mb["kvcast_agent_bytes_pulled_total"] == SEEDED * BLOCK_BYTES
        assert mb["kvcast_agent_blocks_pulled_total"] == ma["kvcast_agent_blocks_served_total"]
        assert mb["kvcast_agent_blocks_pulled_total"] == SEEDED
        assert mb["kvcast_agent_checksum_failures_total"] == 0
        assert mb["kvcast_agent_auth_failures_total{surface=http}"] == 1
        assert ma["kvcast_agent_auth_failures_total{surface=transfer}"] == 0
        assert mb["kvcast_agent_commands_received_total{command=replicate}"] == 2
        refused_key = "kvcast_agent_commands_refused_total{command=replicate,reason=unauthorized}"
        assert mb[refused_key] == 1
        assert mb["kvcast_agent_store_bytes{state=speculative}"] == SEEDED * BLOCK_BYTES
        assert ma["kvcast_agent_store_bytes{state=cached}"] == SEEDED * BLOCK_BYTES

    assert a.stop(signal.SIGINT) == 0, "".join(a.log)
    assert b.stop(signal.SIGTERM) == 0, "".join(b.log)
    for agent in (a, b):
        assert any("stopped" in line for line in agent.log), "".join(agent.log)
        assert not any("Traceback" in line for line in agent.log), "".join(agent.log)
