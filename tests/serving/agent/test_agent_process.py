"""Two real ``kvcast serve agent`` processes on loopback: B replicates A's seeded blocks when
commanded over HTTP (token required), the checksums and metrics of both agree, and SIGINT /
SIGTERM stop each cleanly with exit status 0."""

from __future__ import annotations

import os
import queue
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

READY = re.compile(r"agent (\S+) ready: http=http://(\S+) transfer=(\S+)")
BLOCK_BYTES, SEEDED = 256 << 10, 8


@dataclass
class AgentProcess:
    proc: subprocess.Popen[str]
    http: str = ""
    transfer: str = ""
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    log: list[str] = field(default_factory=list)
    pump: threading.Thread | None = None

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if match := READY.search(line):
                self.http, self.transfer = match.group(2), match.group(3)
                return
        raise AssertionError(f"agent not ready in {timeout_s} s:\n" + "".join(self.log))

    def stop(self, sig: signal.Signals, timeout_s: float = 10.0) -> int:
        """Send ``sig``; the exit status once the process and its output have ended."""
        self.proc.send_signal(sig)
        status = self.proc.wait(timeout=timeout_s)
        if self.pump is not None:
            self.pump.join(timeout=timeout_s)
        return status


def kvcast_command() -> list[str]:
    script = Path(sys.executable).with_name("kvcast")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from kvcast.cli.app import main; main()"]


def start_agent(node_id: str, env: dict[str, str], *extra: str) -> AgentProcess:
    args = [*kvcast_command(), "serve", "agent", "--node-id", node_id,
            "--listen", "127.0.0.1:0", "--transfer-listen", "127.0.0.1:0",
            "--capacity", "64MiB", "--speculative-quota", "16MiB", *extra]  # fmt: skip
    proc = subprocess.Popen(
        args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    agent = AgentProcess(proc)

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            agent.log.append(line)
            agent.lines.put(line)

    agent.pump = threading.Thread(target=pump, daemon=True)
    agent.pump.start()
    return agent


@pytest.fixture
def agents() -> Iterator[list[AgentProcess]]:
    started: list[AgentProcess] = []
    yield started
    for agent in started:  # only what this test started, by its own handle
        if agent.proc.poll() is None:
            agent.proc.kill()
            agent.proc.wait(timeout=5)


def metrics(client: httpx.Client, base: str) -> dict[str, float]:
    out = {}
    for family in text_string_to_metric_families(client.get(f"{base}/metrics").text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def test_two_agent_processes_replicate_verified_blocks_and_stop_cleanly(agents) -> None:
    token = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN"} | {"KVCAST_TOKEN": token}
    seed = ["--seed-blocks", str(SEEDED), "--seed-tenant", "acme",
            "--seed-block-bytes", str(BLOCK_BYTES)]  # fmt: skip
    agents += [start_agent("node-a", env, *seed), start_agent("node-b", env)]
    a, b = agents
    a.wait_ready()
    b.wait_ready()
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=10.0) as http:
        A, B = f"http://{a.http}", f"http://{b.http}"
        source = {x["block_hash"]: x for x in http.get(f"{A}/v1/inventory", headers=auth).json()
                  ["blocks"]}  # fmt: skip
        assert len(source) == SEEDED and {x["tenant"] for x in source.values()} == {"acme"}
        command = {"command_id": "rep-1", "source": a.transfer, "tenant": "acme",
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
