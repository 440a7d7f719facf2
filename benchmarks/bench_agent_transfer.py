"""Agent transfer throughput on loopback vs a raw-socket send/receive of the same bytes.

The source runs in a separate process (as a peer agent does): once as a raw socket server that
``sendall``s the bytes (1 MiB at a time, as the agent's sender writes a large block), once as an
agent whose store holds them as blocks. The receiver (this
process) either ``recv_into``s a buffer, or pulls the blocks with a ``TransferClient``
(checksums verified, blocks committed to a fresh store). Both receive into memory reserved and
touched before timing (the agent through its ``HostBlockPool``), as a serving agent does.
With ``--device cuda`` the agent rounds are run a second time with both agents' blocks in GPU
memory (``kvcast serve agent --device cuda``): the source reads each block back from the
device to send it, the receiver stages it in pinned memory, verifies it and copies it to the
device; the same-run raw socket is the baseline for both. (``--device cpu`` runs the same code
on torch's host tensors: a check of the path, not a figure, since each block is then a fresh
allocation whose pages fault in, where CUDA's caching allocators reuse theirs.)
Source and receiver are pinned to CPUs of different cores when there are two (told to each
process: a child inherits its parent's affinity; until 2026-12-04 both ran on the receiver's
CPU, so earlier figures measured one core doing both sides' work). Rounds alternate; noise
only ever slows a round down, so the ratio is taken from the best round of each (the median
ratio is reported too). Prints JSON.

    python benchmarks/bench_agent_transfer.py [--total-mib 64] [--block-kib 4096] [--rounds 11]
        [--device cuda]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing as mp
import os
import socket
import statistics
import time
from pathlib import Path

import numpy as np

from kvcast.serving.agent import (
    BlockState,
    BlockStore,
    HostBlockPool,
    HostBuffer,
    TransferClient,
    checksum,
)
from kvcast.serving.agent.buffers import BlockBuffer
from kvcast.serving.agent.device_memory import DeviceAllocator, DeviceUnavailable
from kvcast.serving.agent.tcp_server import TransferServer

RAW_SEND_BYTES = 1 << 20


def _payload(total: int) -> np.ndarray:
    return np.random.default_rng(7).integers(0, 256, total, dtype=np.uint8)


def _affinity() -> list[int]:
    """The CPUs this process may run on (empty where the platform cannot tell)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def _siblings(cpu: int) -> set[int]:
    """The hardware threads sharing ``cpu``'s core (itself included), as Linux lists them."""
    path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
    try:
        text = path.read_text().strip()
    except OSError:
        return {cpu}
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def pinned_cpus() -> list[int]:
    """The receiver's and the source's CPUs: two of this process's, on different cores when
    there are (two hyperthreads of one core would share its execution units and caches,
    and slow the agent, which does more work per byte, more than the raw socket)."""
    cpus = _affinity()
    if len(cpus) < 2:
        return cpus
    first = cpus[0]
    other = next((c for c in cpus[1:] if c not in _siblings(first)), cpus[1])
    return [first, other]


def _pin(cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


def _raw_source(total: int, port_out: mp.Queue, rounds: int, cpu: int | None) -> None:
    _pin(cpu)
    data = memoryview(_payload(total))
    with socket.create_server(("127.0.0.1", 0)) as srv:
        port_out.put((srv.getsockname()[1], _affinity()))
        for _ in range(rounds):
            conn, _ = srv.accept()
            with conn:  # in 1 MiB sends, as the agent's sender writes a large block: one
                for i in range(0, total, RAW_SEND_BYTES):  # 64 MiB sendall runs at ~half
                    conn.sendall(data[i : i + RAW_SEND_BYTES])  # the rate across two cores


def _buffer(data: np.ndarray, device: str | None) -> BlockBuffer:
    if device is None:
        return HostBuffer(data.copy())
    buf = DeviceAllocator(device).allocate(len(data))
    buf.view()[:] = data
    return buf


def _agent_source(
    total: int,
    block: int,
    port_out: mp.Queue,
    stop: mp.Event,
    device: str | None,
    cpu: int | None,
) -> None:
    _pin(cpu)

    async def serve() -> None:
        data = _payload(total)
        store = BlockStore(total + block, 0)
        for i in range(total // block):
            buf = _buffer(data[i * block : (i + 1) * block], device)
            store.put("bench", i, buf, checksum(buf.view()))  # commits a device buffer
        server = TransferServer(store)
        port = int((await server.start("127.0.0.1", 0)).rpartition(":")[2])
        port_out.put((port, _affinity()))
        while not stop.is_set():
            await asyncio.sleep(0.05)
        await server.stop()

    asyncio.run(serve())


def _raw_receive(port: int, buf: memoryview) -> float:
    total = len(buf)
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as conn:
        pos = 0
        while pos < total:
            n = conn.recv_into(buf[pos:])
            if n == 0:
                raise ConnectionError("raw source closed early")
            pos += n
    return time.perf_counter() - start


async def _agent_receive(
    port: int, total: int, block: int, allocator: HostBlockPool | DeviceAllocator
) -> float:
    store = BlockStore(total + block, total + block)
    client = TransferClient(store, allocator=allocator)
    start = time.perf_counter()
    result = await client.pull(
        f"127.0.0.1:{port}", range(total // block), "bench", time.monotonic() + 60,
        state=BlockState.SPECULATIVE,
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    if not result.ok or result.bytes_committed != total:
        raise RuntimeError(f"agent pull failed: {result}")
    return elapsed


def device_copy_us(device: str, block: int, n: int = 50) -> tuple[float, float, float]:
    """Median microseconds per block to allocate, stage and commit a block to ``device``, to
    read a committed block back into host memory for a send (the two copies a device agent
    adds to the host path), and, as the same-run baseline of the read-back, the same read
    into pageable memory (``tensor.cpu()``, what the agent did before its pinned read-back)."""
    alloc = DeviceAllocator(device)
    data = _payload(block)
    commit, read, pageable = [], [], []
    for _ in range(n):
        start = time.perf_counter()
        buf = alloc.allocate(block)
        buf.view()[:] = data
        buf.commit()
        commit.append(time.perf_counter() - start)
        start = time.perf_counter()
        view = buf.view()
        read.append(time.perf_counter() - start)
        if bytes(view[:64]) != data[:64].tobytes():
            raise RuntimeError("device read-back returned other bytes")
        start = time.perf_counter()
        host = buf.tensor.cpu().numpy()
        pageable.append(time.perf_counter() - start)
        del view, buf, host
    med = statistics.median
    return round(med(commit) * 1e6, 1), round(med(read) * 1e6, 1), round(med(pageable) * 1e6, 1)


def measure(
    total: int, block: int, rounds: int, cpus: list[int], device: str | None = None
) -> tuple[list[float], list[float], int]:
    """Seconds of each raw transfer and each agent pull of ``total`` bytes, and how many
    agent blocks missed the pool (host memory; ``device``: both agents' blocks on it).
    ``cpus``: the receiver's (this process) and the sources' CPUs, from :func:`pinned_cpus`
    before any pinning (a child inherits its parent's affinity, so each is told its own)."""
    ctx = mp.get_context("spawn")
    ports: mp.Queue = ctx.Queue()
    stop = ctx.Event()
    source_cpu = cpus[1] if len(cpus) == 2 else None
    raw = ctx.Process(target=_raw_source, args=(total, ports, rounds, source_cpu), daemon=True)
    agent = ctx.Process(
        target=_agent_source, args=(total, block, ports, stop, device, source_cpu), daemon=True
    )
    _pin(cpus[0] if len(cpus) == 2 else None)
    raw.start()
    raw_port, raw_cpus = ports.get(timeout=60)
    agent.start()
    agent_port, agent_cpus = ports.get(timeout=60)
    seen = {"receiver": _affinity(), "raw_source": raw_cpus, "agent_source": agent_cpus}
    if len(cpus) == 2 and seen != {"receiver": cpus[:1], "raw_source": cpus[1:],
                                   "agent_source": cpus[1:]}:  # fmt: skip
        raise RuntimeError(f"pinning failed: asked {cpus}, processes run on {seen}")
    raw_buf = np.empty(total, dtype=np.uint8)
    raw_buf.fill(0)
    pool = HostBlockPool(block, 2 * (total // block))
    allocator = pool if device is None else DeviceAllocator(device)
    raw_s, agent_s = [], []
    try:
        for _ in range(rounds):
            raw_s.append(_raw_receive(raw_port, memoryview(raw_buf)))
            agent_s.append(asyncio.run(_agent_receive(agent_port, total, block, allocator)))
            gc.collect()  # return the last round's slots to the pool
    finally:
        stop.set()
        raw.join(10)
        agent.join(10)
    return raw_s, agent_s, pool.fallbacks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total-mib", type=int, default=64)
    parser.add_argument("--block-kib", type=int, default=4096)
    parser.add_argument("--small-block-kib", type=int, default=64)
    parser.add_argument("--small-total-mib", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument(
        "--same-core",
        action="store_true",
        help="source and receiver on one CPU (as before "
        "2026-12-04): the per-byte work of both sides on one core",
    )
    parser.add_argument(
        "--device", default=None, help="also measure with both agents' blocks on it (cuda, cuda:N)"
    )
    args = parser.parse_args()
    if args.device is not None:
        try:
            DeviceAllocator(args.device)
        except DeviceUnavailable as err:
            parser.error(f"--device {args.device}: {err}")
    sizes = (("--total-mib", args.total_mib, args.block_kib),
             ("--small-total-mib", args.small_total_mib, args.small_block_kib))  # fmt: skip
    for what, t, b in sizes:
        if t <= 0 or b <= 0 or (t << 20) % (b << 10):
            parser.error(f"{what} {t} must be a positive whole number of its blocks ({b} KiB)")
    cpus = pinned_cpus()
    if args.same_core and cpus:  # both on the receiver's CPU: one core does both sides' work
        cpus = [cpus[0], cpus[0]]
    total, block = args.total_mib << 20, args.block_kib << 10
    raw_s, agent_s, misses = measure(total, block, args.rounds, cpus)
    s_total, s_block = args.small_total_mib << 20, args.small_block_kib << 10
    s_raw, s_agent, s_misses = measure(s_total, s_block, args.rounds, cpus)
    n_small = s_total // s_block
    med = statistics.median
    report = {
        "bytes": total,
        "block_bytes": block,
        "rounds": args.rounds,
        "cpus_receiver_source": cpus,
        "cpus_share_a_core": len(cpus) == 2 and cpus[1] in _siblings(cpus[0]),
        "raw_socket_gbps": round(total / min(raw_s) / 1e9, 3),
        "agent_gbps": round(total / min(agent_s) / 1e9, 3),
        "ratio": round(min(raw_s) / min(agent_s), 3),
        "median_ratio": round(med(raw_s) / med(agent_s), 3),
        "goal_ratio": 0.7,
        "pool_misses": misses + s_misses,
        "small_block_bytes": s_block,
        "small_blocks": n_small,
        "small_raw_socket_gbps": round(s_total / min(s_raw) / 1e9, 3),
        "small_agent_gbps": round(s_total / min(s_agent) / 1e9, 3),
        "small_ratio": round(min(s_raw) / min(s_agent), 3),
        "per_block_overhead_us": round((min(s_agent) - min(s_raw)) / n_small * 1e6, 1),
        "median_per_block_overhead_us": round((med(s_agent) - med(s_raw)) / n_small * 1e6, 1),
    }
    if args.device is not None:
        for prefix, t, b in (("", total, block), ("small_", s_total, s_block)):
            d_raw, d_agent, _ = measure(t, b, args.rounds, cpus, args.device)
            report |= {
                f"{prefix}device_raw_socket_gbps": round(t / min(d_raw) / 1e9, 3),
                f"{prefix}device_agent_gbps": round(t / min(d_agent) / 1e9, 3),
                f"{prefix}device_ratio": round(min(d_raw) / min(d_agent), 3),
            }
            commit_us, read_us, pageable_us = device_copy_us(args.device, b)
            report |= {f"{prefix}device_stage_commit_us": commit_us,
                       f"{prefix}device_read_back_us": read_us,
                       f"{prefix}device_read_back_pageable_us": pageable_us}  # fmt: skip
        report["device"] = args.device
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
