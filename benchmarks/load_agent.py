"""Agents under a transfer load, their full GC collections paced or left to CPython; one JSON.

Two real ``kvcast serve agent`` processes on loopback: a source seeded with ``--blocks``
blocks of ``--block-bytes`` (many small blocks: the heap of Python objects that a full
collection scans grows with their count, not their bytes) and a target with room for half of
them, which pulls them from the source for ``--duration`` seconds, ``--batch`` blocks per
``POST /v1/replicate`` and ``--concurrency`` commands at a time, cycling through the source's
blocks (so that the target keeps evicting its oldest replicas for new ones: its heap churns
as a serving agent's does). Measured: the replicate commands' latency, ``/healthz`` latency on
both agents (probed every 50 ms; the sidecar's goal is every answer within 100 ms), their RSS
and the pauses of Python's cyclic GC in each, by generation and kind (from their
``kvcast_agent_gc_pause_seconds`` histograms over the load window). Run twice, once with the
agents' default ``gc:`` (full collections paced every ``gc.full_every_s`` and frozen, see
:mod:`kvcast.serving.gc_pacing`) and once with ``gc.paced: false`` (CPython's schedule), in
turn (``--rounds`` times each): the same-run baseline.

    python benchmarks/load_agent.py [--blocks 200000] [--block-bytes 1024] [--duration 45]
                                    [--batch 256] [--concurrency 2] [--rounds 1]
                                    [--full-every-s S]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml
from load_sidecar import gc_pauses, pct, probe, start_kvcast, window

from kvcast.serving.cluster.summary import scrape

READY = re.compile(r"agent (\S+) ready: http=http://(\S+) transfer=(\S+)")
PREFIX = "kvcast_agent_"
TENANT = "seed"


class Agent:
    """A ``kvcast serve agent`` process, started and ready."""

    def __init__(self, node: str, config: Path, capacity: int, *extra: str) -> None:
        args = ["serve", "agent", "--node-id", node, "--listen", "127.0.0.1:0",
                "--transfer-listen", "127.0.0.1:0", "--capacity", str(capacity),
                "--speculative-quota", str(capacity), "--config", str(config), *extra]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN"}
        self.proc, match = start_kvcast(args, env, READY, timeout_s=120.0)
        self.http, self.transfer = f"http://{match.group(2)}", match.group(3)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def replicate(
    http: httpx.AsyncClient, source: str, hashes: list[Any], batch: int, until: float,
    worker: int, workers: int, latency: list[float], moved: list[int],
) -> None:  # fmt: skip
    """Pull batches ``worker``, ``worker + workers``, ... of ``hashes`` (cycling) until
    ``until``; each command's latency (ms) in ``latency``, blocks committed in ``moved``."""
    batches = max(1, len(hashes) // batch)
    n = worker
    while time.monotonic() < until:
        at = (n % batches) * batch
        body = {"command_id": f"load-{worker}-{n}", "source": source, "tenant": TENANT,
                "block_hashes": hashes[at : at + batch], "deadline_s": 60.0}  # fmt: skip
        t0 = time.perf_counter()
        r = await http.post("/v1/replicate", json=body, timeout=120.0)
        r.raise_for_status()
        latency.append((time.perf_counter() - t0) * 1e3)
        moved[0] += len(r.json()["committed"])
        n += workers


async def scrape_all(agents: list[Agent]) -> list[dict[str, float]]:
    async with httpx.AsyncClient() as http:
        return [await scrape(http, a.http) for a in agents]


async def load(source: Agent, target: Agent, args: argparse.Namespace) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=source.http) as http:
        r = await http.get("/v1/inventory", timeout=120.0)
        r.raise_for_status()
        hashes = [b["block_hash"] for b in r.json()["blocks"]]
    agents = [source, target]
    before = await scrape_all(agents)
    until = time.monotonic() + args.duration
    latency: list[float] = []
    moved = [0]
    probes: list[list[float]] = [[], []]
    rss: list[list[float]] = [[], []]

    async def sample_rss() -> None:
        procs = [psutil.Process(a.proc.pid) for a in agents]
        while time.monotonic() < until:
            for out, p in zip(rss, procs, strict=True):
                out.append(p.memory_info().rss / 2**20)
            await asyncio.sleep(1.0)

    clients = [httpx.AsyncClient(base_url=a.http) for a in agents]
    pull = httpx.AsyncClient(base_url=target.http)
    try:
        await asyncio.gather(
            *(replicate(pull, source.transfer, hashes, args.batch, until, w, args.concurrency,
                        latency, moved) for w in range(args.concurrency)),
            *(probe(c, until, out) for c, out in zip(clients, probes, strict=True)),
            sample_rss(),
        )  # fmt: skip
    finally:
        for c in [*clients, pull]:
            await c.aclose()
    after = await scrape_all(agents)
    per_agent = {}
    for name, b, a, hz, mem in zip(("source", "target"), before, after, probes, rss, strict=True):
        per_agent[name] = {
            "healthz_ms": {"p99": pct(hz, 99), "max": max(hz) if hz else None},
            "rss_mb_max": max(mem) if mem else None,
            "gc_pauses": gc_pauses(window(b, a), PREFIX),
        }
    return {
        "replicates": len(latency),
        "blocks_committed": moved[0],
        "blocks_per_s": moved[0] / args.duration,
        "replicate_ms": {
            "p50": pct(latency, 50),
            "p99": pct(latency, 99),
            "max": max(latency) if latency else None,
        },
        **per_agent,
    }


def run(paced: bool, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    config = workdir / f"agent-{'paced' if paced else 'cpython'}.yaml"
    gc: dict[str, Any] = {"paced": paced}
    if args.full_every_s is not None:
        gc["full_every_s"] = args.full_every_s
    config.write_text(yaml.safe_dump({"gc": gc}))
    room = args.blocks * args.block_bytes
    seed = ("--seed-blocks", str(args.blocks), "--seed-tenant", TENANT,
            "--seed-block-bytes", str(args.block_bytes))  # fmt: skip
    source = Agent("src", config, 2 * room, *seed)
    try:
        target = Agent("dst", config, room // 2)
        try:
            return asyncio.run(load(source, target, args))
        finally:
            target.stop()
    finally:
        source.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=200_000)
    ap.add_argument("--block-bytes", type=int, default=1024)
    ap.add_argument("--duration", type=float, default=45.0)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--full-every-s", type=float, default=None,
                    help="gc.full_every_s of the paced agents (default: their own)")  # fmt: skip
    args = ap.parse_args()
    if min(args.blocks, args.block_bytes, args.batch, args.concurrency, args.rounds) < 1:
        raise SystemExit("--blocks, --block-bytes, --batch, --concurrency, --rounds must be >= 1")
    if args.duration <= 0 or (args.full_every_s is not None and args.full_every_s <= 0):
        raise SystemExit(f"--duration and --full-every-s must be > 0, got {args.duration}, "
                         f"{args.full_every_s}")  # fmt: skip
    out: dict[str, Any] = {"blocks": args.blocks, "block_bytes": args.block_bytes,
                           "duration_s": args.duration, "full_every_s": args.full_every_s,
                           "paced": [], "cpython": []}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for paced in (True, False):
                out["paced" if paced else "cpython"].append(run(paced, args, Path(tmp)))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
