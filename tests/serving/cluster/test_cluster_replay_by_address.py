"""``kvcast cluster replay`` against a cluster started by hand (``--sidecar``, ``--agents``,
``--engines``), as real processes on loopback: the sidecar's node names are its own (here
those of ``configs/serving/sidecar.yaml``), not the replay's; engines listed out of the
sidecar's node order are refused (their blocks would land on other nodes than their arrivals);
and the replay tells the clock it played on, writing the requests as played, so that
``kvcast shadow-eval`` can put the sidecar's decisions on the trace's clock. In process: each
arrival reaches the sidecar stamped ``t0_unix_ms`` plus its time in the played trace."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from serve_processes import AGENT_READY, SIDECAR_READY, kvcast_command, start, start_agent

from kvcast.cli.common import open_trace
from kvcast.features.events import RequestArrived
from kvcast.features.traces.loader import load_trace
from kvcast.serving.agent.config import AgentConfig
from kvcast.serving.agent.service import AgentService
from kvcast.serving.cluster.layout import ReplayTargets
from kvcast.serving.cluster.ports import free_ports, tcp_endpoint
from kvcast.serving.cluster.replay import (
    ReplaySpec,
    played_trace,
    requests_of,
    run_replay,
    write_played,
)
from kvcast.serving.sidecar.config import SidecarConfig
from kvcast.serving.sidecar.service import SidecarService

TOKEN = "replay-by-address-token"
NAMES = ("gpu-node-0", "gpu-node-1")  # configs/serving/sidecar.yaml's
BLOCK = "16KiB"


@pytest.fixture
def by_hand(tmp_path: Path):
    """Two agents and a sidecar started by hand; (env, sidecar URL, agent URLs, engines)."""
    env = os.environ | {"KVCAST_TOKEN": TOKEN}
    agents = [start_agent(name, env) for name in NAMES]
    services = list(agents)
    try:
        urls = [f"http://{a.wait_ready(AGENT_READY).group(2)}" for a in agents]
        engines = [tcp_endpoint(p) for p in free_ports(2, outside_ephemeral=True)]
        nodes = [{"name": n, "agent": u, "engine": e}
                 for n, u, e in zip(NAMES, urls, engines, strict=True)]  # fmt: skip
        config = tmp_path / "sidecar.yaml"
        config.write_text(yaml.safe_dump({
            "listen": "127.0.0.1:0", "nodes": nodes, "block_bytes": BLOCK,
            "decision_log": {"path": str(tmp_path / "decisions.parquet")},
        }))  # fmt: skip
        sidecar = start(["serve", "sidecar", "--config", str(config)], env)
        services.append(sidecar)
        sidecar.wait_ready(SIDECAR_READY)
        yield env, sidecar.http, urls, engines
        assert sidecar.stop(signal.SIGTERM) == 0, "".join(sidecar.log)
    finally:
        for service in services:
            service.kill()


def _replay(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*kvcast_command(), "cluster", "replay", "--window-s", "15", "--speed", "15",
         "--settle-s", "0.2", "--block-bytes", BLOCK, *args],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_replay_by_address_takes_the_sidecars_node_names_and_tells_its_clock(
    tmp_path: Path, by_hand
) -> None:
    env, sidecar, agents, engines = by_hand
    out, played = tmp_path / "summary.json", tmp_path / "played.parquet"
    before = time.time() * 1000.0
    r = _replay(env, "--sidecar", sidecar, "--agents", ",".join(agents), "--engines",
                ",".join(engines), "--out", str(out), "--played", str(played))  # fmt: skip
    after = time.time() * 1000.0
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads(out.read_text())
    replay = summary["replay"]
    assert replay["nodes"] == list(NAMES) and list(replay["routed"]) == list(NAMES)
    assert [a["node"] for a in summary["agents"]] == list(NAMES)
    assert replay["events_published"] > 0 and replay["arrival_failures"] == 0
    assert before < replay["t0_unix_ms"] < after
    trace = load_trace(played)
    assert len(trace) == replay["requests"]
    assert trace.requests["arrival_ms"].max() <= 15_000.0 / 15 + 1e-6  # on the wall clock
    text = " ".join(r.stdout.split())
    assert f"--trace {played} --spread off --clock-offset-ms {replay['t0_unix_ms']:.0f}" in text


def test_engines_out_of_the_sidecars_node_order_are_refused(by_hand) -> None:
    env, sidecar, agents, engines = by_hand
    r = _replay(env, "--sidecar", sidecar, "--agents", ",".join(agents),
                "--engines", ",".join(reversed(engines)))  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    text = " ".join((r.stdout + r.stderr).split())
    assert "out of its node order (gpu-node-0, gpu-node-1)" in text, text
    assert f"{engines[1]} -> gpu-node-1" in text and "Traceback" not in text


def test_each_arrival_reaches_the_sidecar_at_t0_plus_its_played_time(
    tmp_path: Path, run_async
) -> None:
    trace = open_trace("bundled:conversation")
    spec = ReplaySpec(window_s=20.0, speed=10.0, time_scale=2.0, block_bytes=16 << 10)
    played = played_trace(trace, spec)
    stamped: dict[str, float] = {}

    async def main() -> dict:
        acfg = AgentConfig(node_id="a", capacity_bytes=64 << 20,
                           speculative_quota_bytes=16 << 20, token=TOKEN)  # fmt: skip
        agent = AgentService(acfg)
        http_address, _ = await agent.start()
        cfg = SidecarConfig.model_validate({
            "listen": "127.0.0.1:0", "nodes": [{"name": "a"}], "token": TOKEN,
            "block_bytes": spec.block_bytes, "decision_log": {"path": None},
        })  # fmt: skip
        service = SidecarService(cfg)
        put = service.sidecar.queue.put

        def spy(events, source, owner=None):
            stamped.update((e.request_id, e.ts_ms) for e in events
                           if isinstance(e, RequestArrived))  # fmt: skip
            return put(events, source, owner)

        service.sidecar.queue.put = spy
        try:
            url = await service.start()
            targets = ReplayTargets(f"http://{url}", (f"http://{http_address}",), ("a",),
                                    token=TOKEN)  # fmt: skip
            return await run_replay(requests_of(played), targets, spec, trace.block_size)
        finally:
            await service.stop()
            await agent.stop()

    stats = run_async(main(), timeout=60.0)
    path = write_played(played, spec, stats["requests"], tmp_path / "played.parquet")
    wall = load_trace(path).requests.set_index("request_id")["arrival_ms"]
    assert len(wall) == len(stamped) == stats["requests"] > 10
    slack = stats["max_lag_s"] * 1000.0 + 50.0
    for request_id, ts_ms in stamped.items():
        assert abs(ts_ms - stats["t0_unix_ms"] - wall[request_id]) <= slack, request_id
