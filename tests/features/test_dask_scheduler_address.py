"""A Dask scheduler address is checked before any work: a typo is one line naming the flag or
key, not a connection error after the replay."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.config import ConfigError, parse_config
from kvcast.features.dask_client import check_scheduler
from kvcast.training.config import TrainConfig


@pytest.mark.parametrize(
    "address", ["local", "tcp://scheduler:8786", "scheduler:8786", "tls://[::1]:8786"]
)
def test_addresses_a_client_can_dial_pass(address: str) -> None:
    assert check_scheduler(address) == address


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("bogus", "is not a Dask scheduler address"),
        ("tcp://scheduler", "is not a Dask scheduler address"),
        ("http://scheduler:8786", "is not a Dask scheduler address"),
        ("tcp://:8786", "is not a Dask scheduler address"),
        ("tcp://scheduler:99999", "port 99999 of 'tcp://scheduler:99999' is out of range"),
    ],
)
def test_a_bad_address_is_refused_naming_the_flag(address: str, why: str) -> None:
    with pytest.raises(ValueError, match=f"--scheduler: .*{why}"):
        check_scheduler(address)


def test_features_refuses_a_bad_scheduler_before_the_replay(monkeypatch) -> None:
    import kvcast.cli.features as features_cli

    def replay(*args, **kwargs):  # the replay must not start
        raise AssertionError("replayed before checking --scheduler")

    monkeypatch.setattr(features_cli, "record_events", replay)
    r = CliRunner().invoke(app, ["features", "--trace", "bundled:conversation", "--engine",
                                 "dask", "--scheduler", "bogus"])  # fmt: skip
    assert r.exit_code == 2 and "--scheduler: 'bogus' is not a Dask" in " ".join(r.output.split())


def test_a_train_configs_scheduler_is_checked_with_the_config() -> None:
    with pytest.raises(ConfigError, match=r"t\.yaml: .*distributed\.scheduler: 'bogus'"):
        parse_config(TrainConfig, {"distributed": {"engine": "dask", "scheduler": "bogus"}},
                     "t.yaml")  # fmt: skip
