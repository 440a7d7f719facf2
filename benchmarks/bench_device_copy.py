"""The device agent's copies, step by step, on a CUDA GPU; prints one JSON object.

Per block size (64 KiB and 4 MiB), the median microseconds of each step a device agent takes
for a block it receives (allocate device memory and pinned staging, fill the staging, copy it
to the device) and for one it sends (read it back into host memory), with the alternatives
beside them as same-run baselines: a device-wide synchronize after the blocking copy (what
the agent did before), a non-blocking copy with a stream synchronize, a reused pinned buffer,
and the pageable ``tensor.cpu()``.

    python benchmarks/bench_device_copy.py [--repeat 200]      (needs torch with CUDA)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def steps(n: int, repeat: int) -> dict[str, float]:
    import torch

    dev = torch.device("cuda")
    data = np.frombuffer(np.random.default_rng(0).bytes(n), np.uint8)
    out: dict[str, float] = {}

    def timed(name: str, fn: Callable[[], Any]) -> None:
        xs = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn()
            xs.append(time.perf_counter() - start)
        out[name] = round(statistics.median(xs) * 1e6, 1)

    torch.empty(n, dtype=torch.uint8, device=dev)
    torch.cuda.synchronize(dev)
    staging = torch.empty(n, dtype=torch.uint8, pin_memory=True).numpy()
    dst = torch.empty(n, dtype=torch.uint8, device=dev)
    src = torch.from_numpy(staging)
    kept = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    stream = torch.cuda.current_stream(dev)

    def stage_commit() -> None:  # DeviceAllocator.allocate, a transport's write, commit()
        tensor = torch.empty(n, dtype=torch.uint8, device=dev)
        pinned = torch.empty(n, dtype=torch.uint8, pin_memory=True).numpy()
        np.copyto(pinned, data)
        tensor.copy_(torch.from_numpy(pinned))

    def read_back() -> np.ndarray:  # DeviceBuffer.view() of a committed block
        host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        host.copy_(dst)
        return host.numpy()

    timed("allocate_device", lambda: torch.empty(n, dtype=torch.uint8, device=dev))
    timed("allocate_pinned_staging", lambda: torch.empty(n, dtype=torch.uint8, pin_memory=True))
    timed("fill_staging", lambda: np.copyto(staging, data))
    timed("copy_to_device_blocking", lambda: dst.copy_(src))
    timed("baseline_copy_then_device_synchronize",
          lambda: (dst.copy_(src), torch.cuda.synchronize(dev)))  # fmt: skip
    timed("baseline_copy_non_blocking_stream_synchronize",
          lambda: (dst.copy_(src, non_blocking=True), stream.synchronize()))  # fmt: skip
    timed("stage_commit", stage_commit)
    timed("read_back_pinned", read_back)
    timed("baseline_read_back_reused_pinned", lambda: kept.copy_(dst))
    timed("baseline_read_back_pageable", lambda: dst.cpu().numpy())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=200, help="timings per step (median)")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("bench_device_copy needs torch with CUDA (pip install torch)")
    if not torch.cuda.is_available():
        sys.exit("bench_device_copy needs a CUDA device; this machine has none")
    report = {
        "device": torch.cuda.get_device_name(0),
        "us_per_block": {str(n): steps(n, args.repeat) for n in (64 << 10, 4 << 20)},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
