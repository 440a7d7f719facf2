"""An evaluation in worker processes gives exactly the sequential result, in the order asked."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from kvcast.features.traces import Trace
from kvcast.simulator.config import SimConfig
from kvcast.simulator.evaluation import PARENT_POLL_S, evaluate


def _stable(summaries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in s.items() if k != "sim_wall_s"} for s in summaries]


def test_parallel_evaluation_equals_sequential(bundled_head: Trace) -> None:
    policies = ["oracle", "dynamo_kv", "predictive_recency"]
    one = evaluate(bundled_head, SimConfig(), policies, [1.0, 3.0], jobs=1)
    two = evaluate(bundled_head, SimConfig(), policies, [1.0, 3.0], jobs=2)
    assert _stable(one.summaries) == _stable(two.summaries)
    assert [(s["policy"], s["time_scale"]) for s in two.summaries] == [
        (p, x) for p in policies for x in (1.0, 3.0)
    ]
    assert list(one.ttft) == list(two.ttft)
    for key in one.ttft:
        assert one.ttft[key].equals(two.ttft[key])


def test_jobs_must_be_positive(bundled_head: Trace) -> None:
    with pytest.raises(ValueError, match="jobs must be >= 1, got 0"):
        evaluate(bundled_head, SimConfig(), ["dynamo_kv"], jobs=0)


WORKING_CPU_S = 2.0  # a worker's CPU time once it is past its imports and computing


def _cpu_s(process: psutil.Process) -> float:
    try:
        times = process.cpu_times()
    except psutil.Error:  # already gone
        return float("inf")
    return times.user + times.system


def test_workers_exit_when_the_evaluation_is_killed(tmp_path: Path) -> None:
    """A scheduler's kill reaches only the evaluation process: its workers must not compute on."""
    cmd = [sys.executable, "-c", "from kvcast.cli.app import app; app()", "evaluate",
           "--trace", "bundled:conversation", "--policies", "dynamo_kv,llmd_precise",
           "--time-scale", "1,2,4,8", "--capacity", "--jobs", "2",
           "--out", str(tmp_path)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[psutil.Process] = []
    try:
        parent = psutil.Process(proc.pid)
        deadline = time.monotonic() + 60.0
        while time.monotonic() < deadline:  # the pool's workers (not the resource tracker)
            workers = [c for c in parent.children() if "spawn_main" in " ".join(c.cmdline())]
            if len(workers) == 2:
                break
            time.sleep(0.2)
        assert len(workers) == 2, "the evaluation never started its two workers"
        # killed while a worker is still importing, it would exit only once its imports end
        # (seconds on a loaded machine): wait until both compute (imports take ~1 s of CPU)
        while time.monotonic() < deadline and min(_cpu_s(w) for w in workers) < WORKING_CPU_S:
            time.sleep(0.1)
        assert proc.poll() is None, "the evaluation ended before it could be killed"
        proc.kill()
        proc.wait(10)
        _, alive = psutil.wait_procs(workers, timeout=4 * PARENT_POLL_S + 2.0)
        assert not alive, f"workers still running after their parent was killed: {alive}"
    finally:
        if proc.poll() is None:
            proc.kill()
        for w in workers:
            with contextlib.suppress(psutil.Error):
                w.kill()
