"""Faults of a distributed fit end in one line, soon: a DDP rank whose peer never joins stops
after ``distributed.timeout_s`` (not torch's 30 minutes), the process group a fit creates is
destroyed on exit, and a Dask cluster without workers is named."""

from __future__ import annotations

import datetime
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch.distributed as dist
import yaml
from tiny_training import SPLIT, TINY_MODELS, tiny_config

from kvcast.training.config import DistributedConfig, TrainConfig
from kvcast.training.data import TrainingData
from kvcast.training.distributed import fit_model
from kvcast.training.models import tcn
from kvcast.training.models.tcn import Ddp, DdpError, fit

ROOT = Path(__file__).resolve().parents[2]
LAUNCH_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE", "RANK")
TCN = TINY_MODELS["tcn"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No launcher variables before the test; whatever the test's fit sets is undone after."""
    for var in LAUNCH_ENV:
        monkeypatch.delenv(var, raising=False)
    yield
    if dist.is_initialized():  # never leak a group into the next test of this worker
        dist.destroy_process_group()


@pytest.mark.slow  # two processes each import torch and Lightning: ~15 s on 2 cores
@pytest.mark.parametrize("failing", [1, 0])
def test_a_rank_whose_peer_failed_before_the_group_formed_stops_after_timeout_s(
    failing: int, tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    """Two nodes of one process each (as torchrun or SLURM start them); one is given a
    features path that does not exist and fails while loading. The other stops within
    ``timeout_s`` with one line naming its rank and the setting, not a 30-minute hang."""
    timeout_s = 2
    cfg = {
        "data": {"features": str(tiny_tables["full"])},
        "split": SPLIT,
        "model": TCN,
        "evaluation": {"budget_k": 16},
        "out_dir": str(tmp_path / "out"),
        "distributed": {"strategy": "ddp", "num_nodes": 2, "timeout_s": timeout_s},
    }
    path = tmp_path / "tcn-ddp.yaml"
    path.write_text(yaml.safe_dump(cfg))
    base = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV}
    base |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"}
    procs = {}
    t0 = time.monotonic()
    for node in (0, 1):
        cmd = [sys.executable, "training/train.py", "--config", str(path), "--no-track"]
        if node == failing:
            cmd += ["--features", str(tmp_path / "missing" / "features.parquet")]
        env = base | {"NODE_RANK": str(node), "LOCAL_RANK": "0"}
        procs[node] = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    logs = {}
    try:
        for node, proc in procs.items():
            out, err = proc.communicate(timeout=60)  # the old code waited 1,800 s here
            logs[node] = out + err
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    took = time.monotonic() - t0
    survivor = 1 - failing
    assert procs[failing].returncode == 2, logs[failing][-2000:]
    assert "missing" in logs[failing]
    assert procs[survivor].returncode == 2, logs[survivor][-2000:]
    (line,) = [ln for ln in logs[survivor].splitlines() if ln.startswith("error:")]
    assert f"DDP rank {survivor} of 2" in line and f"timeout_s={timeout_s}" in line, line
    assert "Traceback" not in logs[survivor]
    assert took < 45


def test_a_ddp_fit_destroys_the_process_group_it_created(
    tiny_data: dict[str, TrainingData], clean_env: None
) -> None:
    """... and puts back the launcher's environment: a second fit in the same process (a
    test, a notebook) forms a new group rather than finding the stale one."""
    params = tcn.TcnParams(**TCN)
    for _ in range(2):
        model = fit(tiny_data["full"], params, 0, ddp=Ddp(1, 1, 20))
        assert model.world_size == 1
        assert not dist.is_initialized()
        assert not {v for v in LAUNCH_ENV if v in os.environ}


def test_a_failing_ddp_fit_destroys_its_process_group_too(
    tiny_data: dict[str, TrainingData], clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: object) -> None:
        raise ValueError("a batch went wrong")

    monkeypatch.setattr(tcn.TcnModule, "training_step", broken)
    with pytest.raises(ValueError, match="a batch went wrong"):
        fit(tiny_data["full"], tcn.TcnParams(**TCN), 0, ddp=Ddp(1, 1, 20))
    assert not dist.is_initialized()


def test_a_process_group_made_before_the_fit_is_left_to_its_maker(
    tiny_data: dict[str, TrainingData], clean_env: None, tmp_path: Path
) -> None:
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    fit(tiny_data["full"], tcn.TcnParams(**TCN), 0, ddp=Ddp(1, 1, 20))
    assert dist.is_initialized()


def test_a_rendezvous_port_in_use_is_one_error_naming_it(
    tiny_data: dict[str, TrainingData], clean_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MASTER_PORT set to a port another program holds: torch's DistNetworkError (a
    RuntimeError: a traceback from the CLI) becomes an OSError naming the address."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", str(port))
        with pytest.raises(DdpError, match=rf"rank 0 of 1 \(rendezvous 127.0.0.1:{port}\).*use"):
            fit(tiny_data["full"], tcn.TcnParams(**TCN), 0, ddp=Ddp(1, 1, 20))
    assert isinstance(DdpError("x"), OSError)  # the CLI reports OSErrors in one line
    assert not dist.is_initialized()


def test_timeout_s_reaches_the_ddp_strategy_and_is_refused_where_nothing_waits() -> None:
    placement = tcn._trainer_placement(Ddp(2, 1, 7))
    assert placement["strategy"]._timeout == datetime.timedelta(seconds=7)
    assert DistributedConfig().timeout_s == 300  # torch's default is 1,800 s
    assert DistributedConfig(strategy="ddp", timeout_s=5).timeout_s == 5
    assert DistributedConfig(engine="dask", timeout_s=5).timeout_s == 5
    with pytest.raises(ValueError, match="timeout_s=5 takes effect with strategy: ddp or"):
        DistributedConfig(timeout_s=5)
    with pytest.raises(ValueError, match="timeout_s"):
        DistributedConfig(strategy="ddp", timeout_s=0)


def test_a_dask_cluster_without_workers_is_named_after_timeout_s(
    tiny_data: dict[str, TrainingData], tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    """A scheduler whose workers have not started (or were scaled to zero): the old code
    failed in numpy ("number sections must be larger than 0"), naming nothing."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=0, processes=False, dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        distributed = {"engine": "dask", "scheduler": address, "timeout_s": 1}
        cfg = tiny_config("lgbm", tiny_tables, tmp_path, distributed=distributed)
        t0 = time.monotonic()
        with pytest.raises(ValueError, match=f"Dask cluster at {address} has no workers.*=1 s"):
            fit_model(cfg, tiny_data["sampled"])
        assert time.monotonic() - t0 < 15
    assert isinstance(cfg, TrainConfig)
