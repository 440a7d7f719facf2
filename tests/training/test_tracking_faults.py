"""A store that fails during training: one clear error, the champion untouched, nothing lost.

The reliability issue's fault: "disk full or an unwritable MLflow store during training". The
store is a real sqlite MLflow store; the faults are real: its artefact folder replaced by a
file (unwritable), and the file-size limit of this process (``RLIMIT_FSIZE``, which binds
root too) set to the database's size, so that any write that grows it fails as on a full disk.
"""

from __future__ import annotations

import resource
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from tiny_training import tiny_config
from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.training.pipeline import run_training
from kvcast.training.tracking import TrackingError

NAME = "kvcast-faults"


def champion_and_versions(uri: str) -> tuple[str, list[str]]:
    from mlflow import MlflowClient

    client = MlflowClient(uri, registry_uri=uri)
    champion = str(client.get_model_version_by_alias(NAME, "champion").version)
    versions = sorted(str(v.version) for v in client.search_model_versions(f"name='{NAME}'"))
    return champion, versions


def first_champion(tiny_tables: dict[str, Path], store: Path) -> tuple[str, dict[str, object]]:
    store.mkdir()
    uri = f"sqlite:///{store / 'mlruns.db'}"
    tracking = {"enabled": True, "tracking_uri": uri, "registered_model": NAME}
    first = run_training(tiny_config("rule", tiny_tables, store.parent / "a", tracking=tracking))
    assert first.registered == f"{NAME}/1" and first.champion == "promoted"
    return uri, tracking


def test_an_unwritable_artifact_store_fails_clearly_and_keeps_the_champion_and_the_model(
    tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    uri, tracking = first_champion(tiny_tables, tmp_path / "store")
    artifacts = tmp_path / "store" / "mlruns"
    shutil.rmtree(artifacts)
    artifacts.write_text("not a folder")  # every artefact write now fails
    out = tmp_path / "b"
    with pytest.raises(TrackingError) as err:
        run_training(tiny_config("lgbm", tiny_tables, out, tracking=tracking))
    message = str(err.value)
    assert "\n" not in message and uri in message and "could not be written" in message
    assert f"'champion' alias of {NAME} was not moved" in message and str(out) in message
    assert champion_and_versions(uri) == ("1", ["1"])
    # nothing trained is lost: the model and its metrics are on local disk
    assert (out / "model.onnx").stat().st_size > 0 and (out / "metrics.json").is_file()


@contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def test_a_full_disk_under_the_store_gives_one_line_and_keeps_the_champion(
    tiny_tables: dict[str, Path], tmp_path: Path
) -> None:
    uri, tracking = first_champion(tiny_tables, tmp_path / "store")
    db = tmp_path / "store" / "mlruns.db"
    cfg = tiny_config("rule", tiny_tables, tmp_path / "b", tracking=tracking)
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    with file_size_limit(db.stat().st_size):  # the store cannot grow by one page
        result = CliRunner().invoke(app, ["train", "--config", str(config)])
    assert result.exit_code == 2, result.output
    line = " ".join(result.output.split())  # rich may wrap the one line on narrow terminals
    assert line.startswith("error: MLflow store") and uri in line and "Traceback" not in line
    assert champion_and_versions(uri) == ("1", ["1"])


def test_registering_versions_prints_none_of_mlflows_own_lines(
    tiny_tables: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The run's summary names the version it registered; MLflow's own "Successfully
    registered model" / "already exists. Creating a new version" / "Created version" lines
    (printed to stderr, not logged) are not shown beside it."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{tmp_path / 'mlruns.db'}"
    tracking = {"enabled": True, "tracking_uri": uri, "registered_model": "kvcast-quiet"}
    runs = [
        run_training(tiny_config("recency", tiny_tables, tmp_path / x, tracking=tracking))
        for x in ("a", "b")
    ]
    assert [r.registered for r in runs] == ["kvcast-quiet/1", "kvcast-quiet/2"]
    err = capfd.readouterr().err
    assert "registered model" not in err.lower() and "created version" not in err.lower()


def test_a_store_that_cannot_work_is_refused_before_the_data_is_read(
    tiny_tables: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tracking server whose port does not answer (MLflow's client retried it for minutes,
    after the replay), and a sqlite file in a directory that does not exist (MLflow made the
    directory and a new, empty store): one line each, before the data is read."""
    import socket

    import kvcast.training.pipeline as pipeline

    def no_data(*args: object) -> None:
        raise AssertionError("the data was read before the store was checked")

    monkeypatch.setattr(pipeline, "load_data", no_data)
    with socket.socket() as closed:  # a port nothing listens on (bound, never listening)
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        for uri, says in (
            (f"http://127.0.0.1:{port}/", "could not be reached"),
            (f"sqlite:///{tmp_path / 'no' / 'such' / 'mlruns.db'}", "does not exist"),
        ):
            tracking = {"enabled": True, "tracking_uri": uri}
            with pytest.raises(TrackingError) as err:
                run_training(tiny_config("rule", tiny_tables, tmp_path / "out", tracking=tracking))
            assert says in str(err.value) and "nothing was trained" in str(err.value)
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize(
    ("env", "proxied"),
    [
        ({"HTTP_PROXY": "http://127.0.0.1:9"}, True),
        ({"ALL_PROXY": "http://127.0.0.1:9"}, True),
        ({"HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": ".invalid"}, False),
        ({}, False),
    ],
)
def test_a_tracking_server_behind_a_proxy_is_not_checked_directly(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], proxied: bool
) -> None:
    """MLflow's client (requests) reaches the server through the proxy the environment names,
    unless NO_PROXY says otherwise: the check is made where the client would connect
    directly, by the client's own rule."""
    from kvcast.training.config import TrackingConfig
    from kvcast.training.tracking import check_store

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    store = TrackingConfig(tracking_uri="http://mlflow.only-the-proxy-knows.invalid:5000")
    if proxied:
        check_store(store)
    else:
        with pytest.raises(TrackingError, match="could not be reached"):
            check_store(store)


def test_a_tracking_uri_with_a_bad_port_is_one_line() -> None:
    from kvcast.training.config import TrackingConfig
    from kvcast.training.tracking import check_store

    for uri in ("http://mlflow:99999", "http://mlflow:abc"):
        with pytest.raises(TrackingError, match="nothing was trained"):
            check_store(TrackingConfig(tracking_uri=uri))
