"""An evaluation in worker processes gives exactly the sequential result, in the order asked."""

from __future__ import annotations

import contextlib
import os
import signal
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


LOADS = ",".join(f"{1 + i / 8:g}" for i in range(40))  # a task of a minute or more


def _computing(tmp_path: Path, **popen: Any) -> tuple[subprocess.Popen[bytes], list[Any]]:
    """An evaluation in two worker processes, returned once both compute."""
    cmd = [sys.executable, "-c", "from kvcast.cli.app import app; app()", "evaluate",
           "--trace", "bundled:conversation", "--policies", "dynamo_kv,llmd_precise",
           "--time-scale", LOADS, "--capacity", "--jobs", "2",
           "--out", str(tmp_path)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, **popen)
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
        assert proc.poll() is None, "the evaluation ended before it could be stopped"
    except BaseException:
        _end(proc, workers)
        raise
    return proc, workers


def _end(proc: subprocess.Popen[bytes], workers: list[Any]) -> None:
    if proc.poll() is None:
        proc.kill()
    for w in workers:
        with contextlib.suppress(psutil.Error):
            w.kill()


def test_workers_exit_when_the_evaluation_is_killed(tmp_path: Path) -> None:
    """A scheduler's kill reaches only the evaluation process: its workers must not compute on."""
    proc, workers = _computing(tmp_path, stderr=subprocess.DEVNULL)
    try:
        proc.kill()
        proc.wait(10)
        _, alive = psutil.wait_procs(workers, timeout=4 * PARENT_POLL_S + 2.0)
        assert not alive, f"workers still running after their parent was killed: {alive}"
    finally:
        _end(proc, workers)


@pytest.mark.parametrize("group", [True, False], ids=["ctrl-c", "sigint-to-the-evaluation"])
def test_an_interrupted_evaluation_stops_at_once_without_a_traceback(
    tmp_path: Path, group: bool
) -> None:
    """Ctrl-C reaches the evaluation and its workers (one process group), ``kill -INT`` the
    evaluation alone: either way it ends in moments, its workers with it, and prints no
    worker's traceback; it does not wait for the simulations under way."""
    proc, workers = _computing(tmp_path, stderr=subprocess.PIPE, start_new_session=True)
    try:
        started = time.monotonic()
        if group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert time.monotonic() - started < 5.0, "the evaluation waited for its simulations"
        assert proc.returncode != 0
        assert b"Traceback" not in err, err.decode()
        _, alive = psutil.wait_procs(workers, timeout=5.0)
        assert not alive, f"workers still running after the evaluation ended: {alive}"
        assert not (tmp_path / "summary.json").exists()
    finally:
        _end(proc, workers)


def test_workers_leave_an_interrupt_to_the_evaluation() -> None:
    """A worker interrupted on its own (Ctrl-C reaches the whole process group) printed a
    traceback: the evaluation alone handles it, and stops them."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from kvcast.simulator.evaluation import _init_worker

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        1, mp_context=ctx, initializer=_init_worker, initargs=(os.getpid(),)
    ) as pool:
        assert pool.submit(signal.getsignal, signal.SIGINT).result() == signal.SIG_IGN
