"""A real ``kvcast serve agent`` process paces Python's full GC collections from a task on
its event loop (one at start, then every ``gc.full_every_s``), each timed on ``/metrics``;
with ``gc.paced: false`` there are none of its own."""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from serve_processes import AGENT_READY, start_agent


def _full_collections(tmp_path: Path, gc: dict[str, object]) -> dict[str, float]:
    config = tmp_path / "agent.yaml"
    config.write_text(yaml.safe_dump({"gc": gc}))
    env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN"}
    proc = start_agent("gc-0", env, "--config", str(config))
    return proc.full_gc_collections(AGENT_READY, "kvcast_agent_", 1.5)


def test_an_agent_process_paces_its_full_collections(tmp_path: Path) -> None:
    got = _full_collections(tmp_path, {"full_every_s": 0.2, "thaw_every": 2})
    assert got["auto"] == 0
    assert got["paced"] >= 2 and got["thaw"] >= 1  # start's, then from its task


def test_unpaced_the_agent_runs_none_of_its_own(tmp_path: Path) -> None:
    got = _full_collections(tmp_path, {"paced": False, "full_every_s": 0.2})
    assert got["paced"] == got["thaw"] == 0
