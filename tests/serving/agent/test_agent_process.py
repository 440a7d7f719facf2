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


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.skipif(not _cuda_available(), reason="no CUDA device: runs on a GPU machine")
def test_blocks_relayed_through_a_cuda_agent_process_arrive_byte_identical(agents) -> None:
    """host agent A -> `--device cuda` agent B -> host agent C, all real processes. C verifies
    every block's checksum against the one A recorded, over bytes that B read back from GPU
    memory: a block the device path altered would fail C's pull."""
    env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN"}
    seed = ["--seed-blocks", str(SEEDED), "--seed-tenant", "acme",
            "--seed-block-bytes", str(BLOCK_BYTES)]  # fmt: skip
    agents += [start_agent("node-a", env, *seed), start_agent("node-b", env, "--device", "cuda"),
               start_agent("node-c", env)]  # fmt: skip
    a, b, c = agents
    transfer = [x.wait_ready(AGENT_READY, timeout_s=60.0).group(3) for x in agents]
    with httpx.Client(timeout=30.0) as http:
        source = {x["block_hash"]: x["checksum"]
                  for x in http.get(f"{a.http}/v1/inventory").json()["blocks"]}  # fmt: skip
        assert http.get(f"{b.http}/v1/telemetry").json()["device"] == "cuda"
        for i, (dst, src) in enumerate(((b, transfer[0]), (c, transfer[1]))):
            command = {"command_id": f"relay-{i}", "source": src, "tenant": "acme",
                       "block_hashes": list(source), "deadline_s": 20.0,
                       "ttl_s": 120.0}  # fmt: skip
            result = http.post(f"{dst.http}/v1/replicate", json=command).json()
            assert result["status"] == "ok", result
            assert result["bytes_committed"] == SEEDED * BLOCK_BYTES
        held = http.get(f"{c.http}/v1/inventory").json()["blocks"]
        assert {x["block_hash"]: x["checksum"] for x in held} == source
        assert metrics(http, c.http)["kvcast_agent_checksum_failures_total"] == 0
    for agent in agents:
        assert agent.stop(signal.SIGTERM) == 0, "".join(agent.log)
