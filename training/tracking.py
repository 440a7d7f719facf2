"""MLflow at the edge of training: the run, its artefacts, the registry and the champion alias.

Store: ``tracking.tracking_uri``, else ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlruns.db``
in the working directory (artefacts of a new experiment then go to ``mlruns/`` beside it).
Registry: one registered model per kind (``kvcast-{kind}`` by default) whose versions are the
ONNX models; the alias ``champion`` moves to a new version only when it beats the current
champion on the *current* run's validation window (the champion is re-scored there, so the
comparison is like for like even if the data changed); the run is tagged with the decision.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import mlflow
import onnx
from mlflow import MlflowClient
from mlflow.entities import Metric
from mlflow.exceptions import MlflowException
from requests.utils import get_environ_proxies, select_proxy
from sqlalchemy.exc import SQLAlchemyError

from kvcast.predictor.model_uri import URI_VARIABLES, shown_uri
from kvcast.training.config import TrackingConfig

DEFAULT_URI = "sqlite:///mlruns.db"
STORE_ERRORS = (MlflowException, SQLAlchemyError, OSError)  # what a failing store raises

log = logging.getLogger(__name__)


class TrackingError(OSError):
    """The MLflow store could not be written (unwritable, disk full, unreachable)."""


def tracking_uri(cfg: TrackingConfig) -> str:
    return cfg.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI


REACH_TIMEOUT_S = 5.0  # a tracking server's port must answer within this


def check_store(cfg: TrackingConfig) -> None:
    """Refuse a store that cannot work, before the data is read (a replay takes minutes, and
    MLflow's client retries an unreachable server for minutes more): a ``sqlite:///`` file in
    a directory that does not exist (MLflow would make the directory and a new, empty store),
    or an ``http(s)://`` server whose port does not answer within ``REACH_TIMEOUT_S`` (not
    checked when the environment routes it through a proxy by requests' rule, ``HTTP(S)_PROXY``,
    ``ALL_PROXY`` and ``NO_PROXY``: MLflow's client goes through it)."""
    uri = tracking_uri(cfg)
    if (db := _sqlite_file(uri)) is not None:
        folder = db.parent
        if not folder.is_dir():
            raise TrackingError(
                f"MLflow store {shown_uri(uri)}: its directory {folder} does not exist (a typo? "
                "create it first for a new store); nothing was trained"
            )
    elif uri.startswith(("http://", "https://")):
        try:
            url = urlsplit(uri)
            port = url.port or (443 if url.scheme == "https" else 80)
            proxied = select_proxy(uri, get_environ_proxies(uri))  # requests' rule (MLflow's)
        except ValueError as err:  # a port that is no number, or out of range
            raise TrackingError(
                f"MLflow store {shown_uri(uri)}: {shown_uri(str(err))}; nothing was trained"
            ) from None
        if proxied:
            return  # reached through a proxy: not directly
        try:
            socket.create_connection((url.hostname or "", port), REACH_TIMEOUT_S).close()
        except OSError as err:
            raise TrackingError(
                f"MLflow store {shown_uri(uri)} could not be reached ({_reason(err)}); nothing was "
                "trained"
            ) from None


def _reason(err: BaseException) -> str:
    """The first line of ``err``, at most 300 characters (cut ones end with an ellipsis), the
    credentials of any URI in it hidden."""
    line = shown_uri((str(err).strip().splitlines() or [type(err).__name__])[0])
    return line if len(line) <= 300 else line[:299] + "\u2026"


def _sqlite_file(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` store (None for another store)."""
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def _artifact_root(uri: str) -> str | None:
    """For a sqlite store: ``mlruns/`` beside the database file (absolute file URI)."""
    db = _sqlite_file(uri)
    return None if db is None else (db.resolve().parent / "mlruns").as_uri()


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out |= flatten(v, key + ".")
        else:
            out[key] = str(v)[:500]
    return out


class Tracker:
    """One MLflow run; use as a context manager."""

    def __init__(self, cfg: TrackingConfig, registered_model: str, run_name: str) -> None:
        self.cfg, self.name, self.run_name = cfg, registered_model, run_name
        self.uri = tracking_uri(cfg)
        self.run_id = ""
        self.promoted: str | None = None  # the version the alias moved to in this run

    def failure(self, err: BaseException, kept: Path | None = None) -> TrackingError:
        """The one-line error for a store that failed mid-run: what failed, what was kept."""
        reason = _reason(err)
        alias = (
            f"the {self.cfg.champion_alias!r} alias was moved to version {self.promoted}"
            if self.promoted
            else f"the {self.cfg.champion_alias!r} alias of {self.name} was not moved"
        )
        where = "" if kept is None else f"; the model and its metrics are kept in {kept}"
        failure = TrackingError(
            f"MLflow store {shown_uri(self.uri)} could not be written ({type(err).__name__}: "
            f"{reason}); {alias}{where}"
        )
        failure.__cause__ = err
        return failure

    def __enter__(self) -> Tracker:
        try:
            return self._start()
        except STORE_ERRORS as err:
            raise TrackingError(
                f"MLflow store {shown_uri(self.uri)} could not be opened ({type(err).__name__}: "
                f"{_reason(err)}); nothing was trained"
            ) from err

    def _start(self) -> Tracker:
        logging.getLogger("mlflow").setLevel(logging.WARNING)
        logging.getLogger("alembic").setLevel(logging.WARNING)
        # a failing store is reported once, in one line, by TrackingError: not as the
        # traceback MLflow's session helper logs before re-raising
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
        # both: the model is registered through the global registry URI, which a model load
        # earlier in this process may have pointed at another store; the setters also write
        # the environment, which __exit__ puts back (a later run reads it for its default)
        self._environment = {k: os.environ.get(k) for k in URI_VARIABLES}
        mlflow.set_tracking_uri(self.uri)
        mlflow.set_registry_uri(self.uri)
        self.client = MlflowClient(self.uri)
        exp = self.client.get_experiment_by_name(self.cfg.experiment)
        exp_id = (
            exp.experiment_id
            if exp is not None
            else self.client.create_experiment(self.cfg.experiment, _artifact_root(self.uri))
        )
        self.run_id = mlflow.start_run(experiment_id=exp_id, run_name=self.run_name).info.run_id
        return self

    def __exit__(self, exc_type: object, *_: object) -> None:
        try:
            mlflow.end_run("FAILED" if exc_type else "FINISHED")
        except STORE_ERRORS as err:  # a failing store must not mask the error being raised
            if exc_type is None:
                raise self.failure(err) from err
            log.warning("MLflow run not closed: %s", err)
        finally:
            for k, v in getattr(self, "_environment", {}).items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def params(self, params: dict[str, Any]) -> None:
        flat = flatten(params)
        items = list(flat.items())
        for s in range(0, len(items), 100):
            mlflow.log_params(dict(items[s : s + 100]))

    def tags(self, tags: dict[str, Any]) -> None:
        mlflow.set_tags({k: str(v) for k, v in tags.items()})

    def metrics(self, metrics: dict[str, float], prefix: str = "") -> None:
        mlflow.log_metrics(
            {f"{prefix}{k}": float(v) for k, v in metrics.items() if v is not None and v == v}
        )

    def history(self, history: dict[str, list[float]]) -> None:
        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, i) for k, vs in history.items() for i, v in enumerate(vs)]
        for s in range(0, len(batch), 1000):
            self.client.log_batch(self.run_id, metrics=batch[s : s + 1000])

    def artifacts(self, files: Iterable[Path]) -> None:
        """Log these files (a run's own outputs: never the whole folder, which may hold
        other work, or the store itself)."""
        for path in files:
            mlflow.log_artifact(str(path))

    def text(self, text: str, name: str) -> None:
        mlflow.log_text(text, name)

    def register(self, proto: onnx.ModelProto) -> str:
        """Log the ONNX model and register it; returns the new version number. MLflow's own
        lines about it ("Registered model ... already exists. Creating a new version ...",
        printed to stderr, not logged) go to this module's debug log: the run's summary says
        which version it made."""
        with contextlib.redirect_stderr(io.StringIO()) as chatter:
            info = mlflow.onnx.log_model(
                proto,
                name="model",
                registered_model_name=self.name,
                pip_requirements=["onnxruntime"],
                save_as_external_data=False,
            )
        if chatter.getvalue().strip():
            log.debug("mlflow: %s", chatter.getvalue().strip())
        return str(info.registered_model_version)

    def champion_version(self) -> str | None:
        """The version the champion alias names; None only when there is none (no such model
        or alias). Any other store error is raised: reading it as "no champion yet" would
        move the alias to any new model, however bad."""
        try:
            return str(
                self.client.get_model_version_by_alias(self.name, self.cfg.champion_alias).version
            )
        except MlflowException as err:
            # no such model: RESOURCE_DOES_NOT_EXIST; a model without the alias:
            # INVALID_PARAMETER_VALUE (MLflow 3)
            if err.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                return None
            raise

    @property
    def champion_uri(self) -> str:
        return f"models:/{self.name}@{self.cfg.champion_alias}"

    def version_uri(self, version: str) -> str:
        """The URI of one registered version (unlike the alias, it cannot move meanwhile)."""
        return f"models:/{self.name}/{version}"

    def promote(self, version: str) -> None:
        self.client.set_registered_model_alias(self.name, self.cfg.champion_alias, version)
        self.promoted = version

    def version_tags(self, version: str, tags: dict[str, Any]) -> None:
        for k, v in tags.items():
            self.client.set_model_version_tag(self.name, version, k, str(v))
