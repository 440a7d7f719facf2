"""Resolve an MLflow model URI (``models:/name@alias``, ``models:/name/version``) to a local
ONNX file. mlflow is imported only here, and only when such a URI is used: the registry is an
edge of the serving path, not part of it.

Registry: the ``tracking_uri`` a caller names, else ``$MLFLOW_TRACKING_URI``, else
``sqlite:///mlruns.db`` in the working directory (the default of
:mod:`kvcast.training.tracking`). mlflow's global URIs are pointed at it for the lookup (logged
models resolve through them) and the process environment is left as it was found
(``mlflow.set_tracking_uri`` also writes ``MLFLOW_TRACKING_URI``). A sqlite store that does not
exist is refused, never created: opening one with mlflow would leave an empty ``mlruns.db``.

An alias is resolved once, to a version, and that version's artefact is downloaded. An
artefact holding several ``.onnx`` files is refused (listing them) unless its ``MLmodel``
names the one to load (the onnx flavor's ``data``).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kvcast.predictor.model_meta import ModelFormatError

_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@]+@")


def shown_uri(text: str) -> str:
    """``text`` (a URI, or a message that holds some) as a message may show it: the user and
    password of every URI in it (``http://user:pw@host``) replaced by ``***``."""
    return _USERINFO.sub(r"\1***@", text)


DEFAULT_TRACKING_URI = "sqlite:///mlruns.db"


def is_model_uri(text: str) -> bool:
    return text.startswith(("models:/", "runs:/"))


URI_VARIABLES = ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")


@contextlib.contextmanager
def environment_kept() -> Iterator[None]:
    """Put the MLflow URI variables back as they were (mlflow's setters write them)."""
    before = {k: os.environ.get(k) for k in URI_VARIABLES}
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass(frozen=True, slots=True)
class Downloaded:
    path: Path  # the local ONNX file
    registry_version: str | None  # the registered version a models:/ URI named (runs:/: None)


def download_model(text: str, tracking_uri: str | None = None) -> Path:
    """The local path of the ONNX file behind ``text``; one-line errors."""
    return fetch_model(text, tracking_uri).path


def fetch_model(text: str, tracking_uri: str | None = None) -> Downloaded:
    """The ONNX file behind ``text`` and the registry version it is; one-line errors."""
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI
    missing = missing_sqlite_store(uri)
    if missing is not None:
        raise ModelFormatError(f"{text}: no MLflow store at {missing} (registry {shown_uri(uri)})")
    with environment_kept():
        return _download(text, uri)


def missing_sqlite_store(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI when it does not exist (else None)."""
    if not uri.startswith("sqlite:///"):
        return None
    db = uri.removeprefix("sqlite:///").split("?", 1)[0]
    if db in ("", ":memory:"):
        return None
    path = Path(db)
    return None if path.is_file() else path


def _download(text: str, uri: str) -> Downloaded:
    import mlflow
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    mlflow.set_tracking_uri(uri)  # logged models (models:/m-...) resolve through the global URI
    mlflow.set_registry_uri(uri)
    number: str | None = None  # the registered version (a runs:/ URI names none)
    try:
        source = text
        if text.startswith("models:/"):
            client = MlflowClient(tracking_uri=uri, registry_uri=uri)
            ref = text.removeprefix("models:/")
            if "@" in ref:
                name, alias = ref.split("@", 1)
                version = client.get_model_version_by_alias(name, alias)
            else:
                name, _, wanted = ref.partition("/")
                version = client.get_model_version(name, wanted)
            source, number = version.source, str(version.version)
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=source, tracking_uri=uri))
    except (MlflowException, SQLAlchemyError, OSError) as err:  # what a failing store raises
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ModelFormatError(shown_uri(f"{text}: {reason} (registry {uri})")) from None
    return Downloaded(_onnx_file(text, local), number)


def _onnx_file(text: str, local: Path) -> Path:
    """The one ONNX file of a downloaded artefact: the file itself, the file its ``MLmodel``
    names, or its only ``.onnx`` file."""
    if local.is_file():
        return local
    named = _mlmodel_data(local)
    if named is not None:
        if not named.is_file():
            raise ModelFormatError(f"{text}: its MLmodel names {named.name}, which it lacks")
        return named
    found = sorted(local.rglob("*.onnx"))
    if not found:
        raise ModelFormatError(f"{text}: the registered artefact holds no .onnx file")
    if len(found) > 1:
        names = ", ".join(str(p.relative_to(local)) for p in found)
        raise ModelFormatError(
            f"{text}: the artefact holds {len(found)} .onnx files ({names}) and no MLmodel "
            "naming one; register a single model"
        )
    return found[0]


def _mlmodel_data(local: Path) -> Path | None:
    """The file the onnx flavor of ``local/MLmodel`` names (None: no MLmodel, or no name)."""
    import yaml

    mlmodel = local / "MLmodel"
    if not mlmodel.is_file():
        return None
    try:
        doc = yaml.safe_load(mlmodel.read_text())
        data = doc["flavors"]["onnx"]["data"]
    except (yaml.YAMLError, KeyError, TypeError):
        return None
    return local / data if isinstance(data, str) and data else None
