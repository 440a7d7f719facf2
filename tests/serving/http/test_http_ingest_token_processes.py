"""The ingest token across real processes on loopback: a ``kvcast serve agent`` and a
``kvcast serve sidecar`` started with a shared token and an ingest token. The ingest token
posts arrivals and KV events to the sidecar (202) and an engine's queue depth to the agent
(204); it is refused 403 on the sidecar's mode, model, decisions and block lookups and on the
agent's replicate, evict, pin, upload, inventory and removals, counted; a transfer-port
``Hello`` carrying it is refused as a wrong token's; a wrong token is 401. Neither secret is
ever logged."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
from typing import Any

import httpx
import yaml
from serve_processes import AGENT_READY, SIDECAR_READY, Service, start, start_agent

from kvcast.serving.agent.tcp_server import read_frame
from kvcast.serving.cluster.summary import parse_metrics
from kvcast.serving.messages import BlockHeader, Error, ErrorCode, Hello, Message, PullRequest
from kvcast.serving.messages import encode as encode_frame
from kvcast.serving.tls import ENV as TLS_ENV


def _env(**tokens: str) -> dict[str, str]:
    drop = {"KVCAST_TOKEN", "KVCAST_INGEST_TOKEN", *TLS_ENV.values()}
    return {k: v for k, v in os.environ.items() if k not in drop} | tokens


async def _first_answer(transfer: str, token: str, block_hash: int) -> Message:
    """The first frame a transfer server answers a Hello with ``token`` and a pull with."""
    host, port = transfer.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(encode_frame(Hello("engine-0", token)))
        writer.write(encode_frame(PullRequest("c-1", "acme", (block_hash,))))
        await writer.drain()
        return await asyncio.wait_for(read_frame(reader), 10.0)
    finally:
        writer.close()


def _sidecar_config(tmp_path: Any, agent: str) -> str:
    path = tmp_path / "sidecar.yaml"
    path.write_text(yaml.safe_dump({
        "listen": "127.0.0.1:0", "nodes": [{"name": "gpu-0", "agent": agent}, {"name": "gpu-1"}],
        "tick_ms": 100.0, "decision_log": {"path": str(tmp_path / "decisions.parquet")},
    }))  # fmt: skip
    return str(path)


def _sidecar_checks(http: httpx.Client, base: str, mine: dict[str, str]) -> None:
    arrival = {"request_id": "r-1", "node": "gpu-0", "tenant": "acme", "block_hashes": [7, 8],
               "input_tokens": 32, "queue_depth": 3}  # fmt: skip
    r = http.post(f"{base}/v1/requests", json={"requests": [arrival]}, headers=mine)
    assert r.status_code == 202 and r.json()["accepted"] == 1, r.text
    stored = {"type": "BlockStored", "block_hashes": [7, 8], "block_size": 16}
    r = http.post(f"{base}/v1/kv-events", json={"node": "gpu-0", "events": [stored]},
                  headers=mine)  # fmt: skip
    assert r.status_code == 202 and r.json()["accepted"] == 1, r.text
    refused = [("POST", "/v1/mode", {"mode": "active"}), ("POST", "/v1/model", {"source": "x"}),
               ("GET", "/v1/model", None), ("GET", "/v1/decisions", None),
               ("GET", "/v1/blocks/7", None)]  # fmt: skip
    for method, path, body in refused:
        r = http.request(method, f"{base}{path}", json=body, headers=mine)
        assert r.status_code == 403 and "ingest token may not use" in r.text, (path, r.text)
    assert http.get(f"{base}/v1/mode").json()["mode"] == "shadow"
    r = http.post(f"{base}/v1/requests", json={"requests": [arrival]},
                  headers={"Authorization": "Bearer wrong"})  # fmt: skip
    assert r.status_code == 401
    metrics = parse_metrics(http.get(f"{base}/metrics").text)
    assert metrics["kvcast_sidecar_ingest_refusals_total"] == len(refused)
    assert metrics["kvcast_sidecar_auth_failures_total"] == 1


def _agent_checks(
    http: httpx.Client, base: str, mine: dict[str, str], admin: dict[str, str]
) -> int:
    """The agent's HTTP rules; a block hash it holds."""
    r = http.post(f"{base}/v1/engine-stats", json={"engine_id": "e0", "queue_depth": 5},
                  headers=mine)  # fmt: skip
    assert r.status_code == 204, r.text
    assert http.get(f"{base}/v1/telemetry").json()["queue_depth"] == 5
    held = http.get(f"{base}/v1/inventory", headers=admin).json()["blocks"]
    h = held[0]["block_hash"]
    command = {"tenant": "acme", "block_hashes": [h]}
    refused = [("POST", "/v1/replicate", command | {"command_id": "c", "source": "127.0.0.1:1"}),
               ("POST", "/v1/evict", command), ("POST", "/v1/pin", command),
               ("PUT", "/v1/blocks", command), ("GET", "/v1/inventory", None),
               ("GET", "/v1/removals", None)]  # fmt: skip
    for method, path, body in refused:
        r = http.request(method, f"{base}{path}", json=body, headers=mine)
        assert r.status_code == 403 and "ingest token may not use" in r.text, (path, r.text)
    after = http.get(f"{base}/v1/inventory", headers=admin).json()["blocks"]
    assert after == held  # nothing evicted, pinned or stored
    r = http.post(f"{base}/v1/engine-stats", json={"queue_depth": 1},
                  headers={"Authorization": "Bearer wrong"})  # fmt: skip
    assert r.status_code == 401
    metrics = parse_metrics(http.get(f"{base}/metrics").text)
    assert metrics["kvcast_agent_http_ingest_refusals_total"] == len(refused)
    return h


def test_real_processes_let_the_ingest_token_report_and_do_nothing_else(tmp_path) -> None:
    shared, reports = secrets.token_hex(16), secrets.token_hex(16)
    env = _env(KVCAST_TOKEN=shared, KVCAST_INGEST_TOKEN=reports)
    seed = ["--seed-blocks", "2", "--seed-tenant", "acme", "--seed-block-bytes", "4096"]
    services: list[Service] = [start_agent("gpu-0", env, *seed)]
    try:
        transfer = services[0].wait_ready(AGENT_READY).group(3)
        agent = services[0].http
        services.append(start(["serve", "sidecar", "--config", _sidecar_config(tmp_path, agent)],
                              env))  # fmt: skip
        services[1].wait_ready(SIDECAR_READY)
        mine, admin = {"Authorization": f"Bearer {reports}"}, {"Authorization": f"Bearer {shared}"}
        with httpx.Client(timeout=10.0) as http:
            _sidecar_checks(http, services[1].http, mine)
            h = _agent_checks(http, agent, mine, admin)
            refused = [asyncio.run(_first_answer(transfer, t, h)) for t in (reports, "wrong")]
            assert isinstance(refused[0], Error) and refused[0].code is ErrorCode.UNAUTHORIZED
            assert refused[0] == refused[1]  # exactly as an unknown token's
            assert isinstance(asyncio.run(_first_answer(transfer, shared, h)), BlockHeader)
            metrics = parse_metrics(http.get(f"{agent}/metrics").text)
            assert metrics["kvcast_agent_auth_failures_total{surface=transfer}"] == 2
        for service in reversed(services):
            assert service.stop(signal.SIGTERM) == 0, "".join(service.log)
    finally:
        for service in services:
            service.kill()
    for service in services:
        log = "".join(service.log)
        assert "ingest token: " in log and "Traceback" not in log, log
        assert shared not in log and reports not in log
