"""Mutation fuzzing of kvcast's untrusted-input decoders; prints a JSON report.

    python fuzz/run.py --target kv_events --inputs 100000 [--seed 0]
    python fuzz/run.py --target all

Inputs are seeded mutations of valid encodings (bit flips, byte overwrites, truncation,
insertion, duplication, splicing) plus purely random byte strings. Every input must return or
raise the target's documented error; the report counts both, lists crashes (any other
exception, with the input in hex) and the slowest input (a hang shows as a time far above the
rest). Exit status 1 on any crash.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from targets import TARGETS, Target


def mutate(data: bytes, rng: random.Random, pool: list[bytes]) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        if op == 0 and b:
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and b:
            b[rng.randrange(len(b))] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        elif op == 2 and b:
            del b[rng.randrange(len(b)) :]
        elif op == 3:
            i = rng.randrange(len(b) + 1)
            b[i:i] = rng.randbytes(rng.randint(1, 8))
        elif op == 4 and b:
            i = rng.randrange(len(b))
            j = min(len(b), i + rng.randint(1, 16))
            b[i:i] = b[i:j]
        elif op == 5:
            other = rng.choice(pool)
            cut = rng.randrange(len(other) + 1)
            b = b[: rng.randrange(len(b) + 1)] + bytearray(other[cut:])
        else:
            b = bytearray(rng.randbytes(rng.randint(0, 64)))
    return bytes(b)


def fuzz(target: Target, inputs: int, seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    seeds = target.seeds(rng)
    outcomes: Counter[str] = Counter()
    crashes: list[dict[str, str]] = []
    slowest = (0.0, "")
    t0 = time.perf_counter()
    for k in range(inputs):
        data = rng.choice(seeds) if k < len(seeds) else mutate(rng.choice(seeds), rng, seeds)
        start = time.perf_counter()
        try:
            target.run(data)
            outcomes["accepted"] += 1
        except target.expected:
            outcomes["rejected"] += 1
        except Exception as err:  # anything else is a crash: record it
            outcomes["crashed"] += 1
            if len(crashes) < 10:
                crashes.append({"error": repr(err), "input_hex": data.hex()})
        took = time.perf_counter() - start
        if took > slowest[0]:
            slowest = (took, data.hex()[:200])
    return {
        "target": target.name,
        "inputs": inputs,
        "seed": seed,
        "accepted": outcomes["accepted"],
        "rejected": outcomes["rejected"],
        "crashed": outcomes["crashed"],
        "crashes": crashes,
        "slowest_input_ms": round(slowest[0] * 1e3, 3),
        "slowest_input_hex": slowest[1],
        "wall_s": round(time.perf_counter() - t0, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", choices=[*TARGETS, "all"], default="all")
    ap.add_argument("--inputs", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    names = list(TARGETS) if args.target == "all" else [args.target]
    reports = [fuzz(TARGETS[n], args.inputs, args.seed) for n in names]
    print(json.dumps(reports, indent=2))
    return 1 if any(r["crashed"] for r in reports) else 0


if __name__ == "__main__":
    raise SystemExit(main())
