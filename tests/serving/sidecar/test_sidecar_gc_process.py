"""A real ``kvcast serve sidecar`` process paces Python's full GC collections: one at start,
then one between two ticks every ``gc.full_every_s``, each timed on ``/metrics``; with
``gc.paced: false`` CPython's own schedule is left alone (still timed)."""

from __future__ import annotations

import os
from pathlib import Path

import yaml
from serve_processes import SIDECAR_READY, start


def _full_collections(tmp_path: Path, gc: dict[str, object]) -> dict[str, float]:
    cfg = {"listen": "127.0.0.1:0", "nodes": [{"name": "gpu-0"}], "tick_ms": 20.0, "gc": gc,
           "decision_log": {"path": None}}  # fmt: skip
    config = tmp_path / "sidecar.yaml"
    config.write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if k != "KVCAST_TOKEN"}
    proc = start(["serve", "sidecar", "--config", str(config)], env)
    return proc.full_gc_collections(SIDECAR_READY, "kvcast_sidecar_", 1.5)


def test_a_sidecar_process_runs_its_full_collections_between_ticks(tmp_path: Path) -> None:
    got = _full_collections(tmp_path, {"full_every_s": 0.2, "thaw_every": 2})
    assert got["auto"] == 0  # none on CPython's schedule
    assert got["paced"] >= 2 and got["thaw"] >= 1  # start's, then between ticks


def test_unpaced_the_process_leaves_cpython_its_schedule(tmp_path: Path) -> None:
    """None at start, none between ticks."""
    got = _full_collections(tmp_path, {"paced": False, "full_every_s": 0.2})
    assert got["paced"] == got["thaw"] == 0
