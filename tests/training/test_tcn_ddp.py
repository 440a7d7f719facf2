"""The TCN trains with Lightning DDP on CPU (2 processes, gloo) from the same train.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tiny_training import SPLIT, TINY_MODELS

from kvcast.predictor.scorer import OnnxScorer
from kvcast.training.distributed import secondary_rank

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # two processes each import torch and Lightning: about 20 s on 2 cores
def test_train_py_fits_the_tcn_with_ddp_over_two_gloo_processes(
    tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    cfg = {
        "data": {"features": str(tiny_tables["full"])},
        "split": SPLIT,
        "model": TINY_MODELS["tcn"],
        "evaluation": {"budget_k": 16},
        "out_dir": str(out),
        "distributed": {"strategy": "ddp", "devices": 2},
    }
    path = tmp_path / "tcn-ddp.yaml"
    path.write_text(yaml.safe_dump(cfg))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "NODE_RANK")}
    done = subprocess.run(
        [sys.executable, "training/train.py", "--config", str(path), "--no-track"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-3000:]
    assert "GLOBAL_RANK: 0, MEMBER: 1/2" in log and "GLOBAL_RANK: 1, MEMBER: 2/2" in log
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["kind"] == "tcn" and metrics["test"]["rows"] > 0
    assert metrics["onnx_parity_max_abs"] < 1e-4
    assert OnnxScorer.load(out / "model.onnx").kind == "tcn"


def test_only_rank_zero_is_the_primary_process(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("RANK", "LOCAL_RANK", "NODE_RANK"):
        monkeypatch.delenv(var, raising=False)
    assert not secondary_rank()
    monkeypatch.setenv("RANK", "0")
    assert not secondary_rank()
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert secondary_rank()
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("NODE_RANK", "1")
    assert secondary_rank()
