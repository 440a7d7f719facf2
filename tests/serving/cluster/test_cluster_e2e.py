"""End to end on loopback with real processes: ``kvcast cluster up`` (a sidecar and 3 agents),
and a 2-minute slice of the bundled conversation trace replayed 10x faster than real time by
the router (arrivals to the sidecar) and the engines (block bytes into their agents, vLLM KV
events over ZMQ), first in shadow mode, then in active mode.

Shadow (``kvcast cluster replay``, a process): the sidecar decides, and nothing moves.
Active (the engines restarted with empty caches, the sidecar switched to active, the replay
in this process): replications happen; every replicated block's checksum equals its
source's (and the one its bytes must have); no agent's speculative bytes ever exceed its
quota; the sidecar's replicated bytes equal the bytes the agents pulled and served. Ctrl-C
then stops every process with status 0 and leaves none behind, and the decision log holds the
shadow decisions and the active ones. One cluster for both modes: starting and stopping one
costs a quarter of the test.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
from onnx_models import write_recency_model
from serve_processes import kvcast_command, start

from kvcast.cli.common import open_trace
from kvcast.features.config import FeatureConfig
from kvcast.features.spec import build_spec
from kvcast.serving.cluster.blocks import BlockMaker
from kvcast.serving.cluster.layout import ClusterLayout, ReplayTargets, read_layout
from kvcast.serving.cluster.replay import ReplaySpec, run_replay, trace_requests
from kvcast.serving.cluster.summary import collect

CLUSTER_READY = re.compile(r"cluster ready: sidecar=(\S+) ")
TOKEN_ENV = "KVCAST_E2E_TOKEN"
BLOCK = 16 << 10  # small blocks keep loopback fast; the number of blocks is the trace's
SIZES = ["--capacity", "48MiB", "--speculative-quota", "16MiB", "--block-bytes", "16KiB"]
WINDOW_S, SPEED = 120.0, 10.0
SLICE_REQUESTS = 339  # requests of the bundled conversation trace in [0, 120) s
A = "kvcast_agent_"


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    cmdline = Path(f"/proc/{pid}/cmdline")  # a zombie or a reused pid is not our process
    return not cmdline.exists() or b"kvcast" not in cmdline.read_bytes()


def _shadow_phase(workdir: Path, env: dict[str, str], out: Path) -> None:
    replay = subprocess.run(
        [*kvcast_command(), "cluster", "replay", "--cluster", str(workdir), "--window-s",
         str(WINDOW_S), "--speed", str(SPEED), "--settle-s", "1", "--out", str(out),
         "--played", str(out.with_name("played.parquet"))],
        env=env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert replay.returncode == 0, replay.stdout + replay.stderr
    # the command it prints judges the decision log this sidecar wrote during the replay
    said = " ".join(replay.stdout.split())
    assert "judge the sidecar's decisions with `kvcast shadow-eval --decisions " in said, said
    log = Path(said.split("--decisions ")[1].split(" ")[0])
    assert log.is_file() and log.parent == workdir, log
    summary = json.loads(out.read_text())
    played, side = summary["replay"], summary["sidecar"]
    assert played["requests"] == played["arrivals_posted"] == SLICE_REQUESTS
    assert played["put_failures"] == 0 and played["requests_unfinished"] == 0
    assert played["blocks_evicted"] > 0 and played["events_published"] > played["requests"]
    assert side["decisions"].get("replicate", 0) > 0, side
    assert side["replications_issued"] == side["replicated_bytes"] == 0
    assert summary["agents_bytes_pulled"] == 0
    assert all(a["bytes_served"] == a["speculative_bytes"] == 0 for a in summary["agents"])


async def _restart_engines(http: httpx.AsyncClient, agents: list[str], auth: dict) -> None:
    """Empty every agent, as the engines' caches are empty when they restart."""
    for agent in agents:
        blocks = (await http.get(f"{agent}/v1/inventory", headers=auth)).json()["blocks"]
        for tenant in {b["tenant"] for b in blocks}:
            hashes = [b["block_hash"] for b in blocks if b["tenant"] == tenant]
            r = await http.post(f"{agent}/v1/evict", headers=auth,
                                json={"tenant": tenant, "block_hashes": hashes})  # fmt: skip
            assert r.status_code == 200 and not r.json()["pinned"]


async def _settled(http: httpx.AsyncClient, sidecar: str, agents: list[str]) -> tuple:
    """Scrape until no pull is in flight and the sidecar's replicated bytes equal the agents'
    pulled bytes (commands in flight settle first), at most 15 s; the last scrape."""
    deadline = time.monotonic() + 15.0
    while True:
        side, per_agent, telemetry = await collect(http, sidecar, agents)
        pulled = sum(m[A + "bytes_pulled_total"] for m in per_agent)
        busy = any(t["replications_in_flight"] for t in telemetry)
        agreed = side["kvcast_sidecar_replicated_bytes_total"] == pulled and not busy
        if agreed or time.monotonic() > deadline:
            return side, per_agent, telemetry
        await asyncio.sleep(0.2)


async def _active_phase(layout: ClusterLayout, token: str) -> None:
    auth, agents = {"Authorization": f"Bearer {token}"}, [n.agent for n in layout.nodes]
    trace = open_trace("bundled:conversation")
    spec = ReplaySpec(window_s=WINDOW_S, speed=SPEED, block_bytes=BLOCK)
    async with httpx.AsyncClient(timeout=10.0) as http:
        await _restart_engines(http, agents, auth)
        r = await http.post(f"{layout.sidecar}/v1/mode", json={"mode": "active"}, headers=auth)
        assert r.status_code == 200
        targets = ReplayTargets.from_layout(layout, token)
        played = await run_replay(trace_requests(trace, spec), targets, spec, trace.block_size)
        assert played["put_failures"] == 0 and played["requests_unfinished"] == 0
        r = await http.post(f"{layout.sidecar}/v1/mode", json={"mode": "shadow"}, headers=auth)
        assert r.status_code == 200  # no new command: let the last ones settle
        side, per_agent, telemetry = await _settled(http, layout.sidecar, agents)
        held = [(await http.get(f"{a}/v1/inventory", headers=auth)).json()["blocks"]
                for a in agents]  # fmt: skip
        r = await http.get(f"{layout.sidecar}/v1/decisions",
                           params={"limit": 10000, "kind": "replicate"}, headers=auth)  # fmt: skip
        decisions: list[dict[str, Any]] = r.json()["decisions"]

    assert side["kvcast_sidecar_replications_done_total"] > 0
    pulled = sum(m[A + "bytes_pulled_total"] for m in per_agent)
    served = sum(m[A + "bytes_served_total"] for m in per_agent)
    again = sum(m[A + "bytes_pulled_already_held_total"] for m in per_agent)  # pulls overlapped
    assert side["kvcast_sidecar_replicated_bytes_total"] == pulled == served - again > 0
    assert sum(m[A + "checksum_failures_total"] for m in per_agent) == 0
    for t in telemetry:  # the quota held throughout (peak) and holds now
        assert t["peak_speculative_bytes"] <= t["speculative_quota_bytes"], t
        assert t["bytes"]["speculative"] <= t["speculative_quota_bytes"], t
    maker = BlockMaker(BLOCK)
    for blocks in held:  # every copy of a block has the bytes it was computed with
        for b in blocks:
            assert b["checksum"] == maker.checksum(b["tenant"], b["block_hash"]), b
    assert any(b["state"] == "speculative" for blocks in held for b in blocks)
    sums = [{(b["tenant"], b["block_hash"]): b["checksum"] for b in blocks} for blocks in held]
    names, compared = list(layout.node_names), 0
    for d in decisions:
        if d["status"] == "done" and d["mode"] == "active":
            src, dst = names.index(d["source"]), names.index(d["target"])
            both = [k for k in ((d["tenant"], h) for h in d["block_hashes"])
                    if k in sums[src] and k in sums[dst]]  # fmt: skip
            assert all(sums[dst][k] == sums[src][k] for k in both)
            compared += len(both)
    assert compared > 0


def test_cluster_shadow_then_active_moves_verified_bytes_within_quota(tmp_path: Path) -> None:
    model = write_recency_model(tmp_path / "model.onnx", build_spec(FeatureConfig()))
    token, workdir = secrets.token_hex(16), tmp_path / "cluster"
    env = {k: v for k, v in os.environ.items() if k not in ("KVCAST_TOKEN", TOKEN_ENV)}
    env[TOKEN_ENV] = token
    up = start(["cluster", "up", "--agents", "3", "--mode", "shadow", "--model", str(model),
                "--workdir", str(workdir), "--token-env", TOKEN_ENV, *SIZES], env)  # fmt: skip
    try:
        up.wait_ready(CLUSTER_READY, timeout_s=60.0)
        layout = read_layout(workdir)
        assert len(layout.nodes) == 3 and layout.token_env == TOKEN_ENV
        _shadow_phase(workdir, env, tmp_path / "shadow.json")
        asyncio.run(asyncio.wait_for(_active_phase(layout, token), 90.0))
        assert up.stop(signal.SIGINT, timeout_s=30.0) == 0, "".join(up.log)
    finally:
        up.kill()
    assert any("cluster stopped: 4 processes exited 0" in line for line in up.log), up.log
    assert not (workdir / "cluster.json").exists()
    assert all(_gone(pid) for pid in layout.pids.values()), layout.pids
    log = pq.read_table(workdir / "decisions.parquet").to_pydict()
    assert {"shadow", "active"} <= set(log["mode"])
    shadow_kinds = {k for k, m in zip(log["kind"], log["mode"], strict=True) if m == "shadow"}
    assert "replicate" in shadow_kinds
