"""A real ``kvcast serve agent`` process paces Python's full GC collections from a task on
its event loop (one at start, then every ``gc.full_every_s``), each timed on ``/metrics``;
with ``gc.paced: false`` there are none of its own."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import yaml
from serve_processes import AGENT_READY, start_agent

from kvcast.serving.cluster.summary import parse_metrics

FULL = "kvcast_agent_gc_pause_seconds_count{generation=2,kind=%s}"  # as parse_metrics keys it


def _full_collections(tmp_path: Path, gc: dict[str, object], wait_s: float) -> dict[str, float]:
    """The agent process's full collections by kind, ``wait_s`` after it is ready."""
    config = tmp_path / "agent.yaml"
    config.write_text(yaml.safe_dump({"gc": gc}))
    env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN"}
    proc = start_agent("gc-0", env, "--config", str(config))
    try:
        proc.wait_ready(AGENT_READY)
        time.sleep(wait_s)
        with httpx.Client(base_url=proc.http, timeout=10.0) as http:
            metrics = parse_metrics(http.get("/metrics").text)
        assert proc.stop(signal.SIGINT) == 0, "".join(proc.log)
    finally:
        proc.kill()
    return {kind: metrics.get(FULL % kind, 0.0) for kind in ("auto", "paced", "thaw")}


def test_an_agent_process_paces_its_full_collections(tmp_path: Path) -> None:
    got = _full_collections(tmp_path, {"full_every_s": 0.2, "thaw_every": 2}, 1.5)
    assert got["auto"] == 0
    assert got["paced"] >= 2 and got["thaw"] >= 1  # start's, then from its task


def test_unpaced_the_agent_runs_none_of_its_own(tmp_path: Path) -> None:
    got = _full_collections(tmp_path, {"paced": False, "full_every_s": 0.2}, 1.5)
    assert got["paced"] == got["thaw"] == 0
