"""A real ``kvcast serve sidecar`` process paces Python's full GC collections: one at start,
then one between two ticks every ``gc.full_every_s``, each timed on ``/metrics``; with
``gc.paced: false`` CPython's own schedule is left alone (still timed)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import yaml
from serve_processes import SIDECAR_READY, start

from kvcast.serving.cluster.summary import parse_metrics

FULL = "kvcast_sidecar_gc_pause_seconds_count{generation=2,kind=%s}"  # as parse_metrics keys it


def _full_collections(tmp_path: Path, gc: dict[str, object], wait_s: float) -> dict[str, float]:
    """The process's full collections by kind, ``wait_s`` after it is ready."""
    cfg = {"listen": "127.0.0.1:0", "nodes": [{"name": "gpu-0"}], "tick_ms": 20.0, "gc": gc,
           "decision_log": {"path": None}}  # fmt: skip
    config = tmp_path / "sidecar.yaml"
    config.write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN"}
    proc = start(["serve", "sidecar", "--config", str(config)], env)
    try:
        proc.wait_ready(SIDECAR_READY)
        time.sleep(wait_s)
        with httpx.Client(base_url=proc.http, timeout=10.0) as http:
            metrics = parse_metrics(http.get("/metrics").text)
        assert proc.stop(signal.SIGINT) == 0, "".join(proc.log)
    finally:
        proc.kill()
    return {kind: metrics.get(FULL % kind, 0.0) for kind in ("auto", "paced", "thaw")}


def test_a_sidecar_process_runs_its_full_collections_between_ticks(tmp_path: Path) -> None:
    got = _full_collections(tmp_path, {"full_every_s": 0.2, "thaw_every": 2}, 1.5)
    assert got["auto"] == 0  # none on CPython's schedule
    assert got["paced"] >= 2 and got["thaw"] >= 1  # start's, then between ticks


def test_unpaced_the_process_leaves_cpython_its_schedule(tmp_path: Path) -> None:
    """None at start, none between ticks."""
    got = _full_collections(tmp_path, {"paced": False, "full_every_s": 0.2}, 1.5)
    assert got["paced"] == got["thaw"] == 0
