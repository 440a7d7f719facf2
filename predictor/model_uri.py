"""Resolve an MLflow model URI (``models:/name@alias``, ``models:/name/version``) to a local
ONNX file. mlflow is imported only here, and only when such a URI is used: the registry is an
edge of the serving path, not part of it.

Registry: the ``tracking_uri`` a caller names, else ``$MLFLOW_TRACKING_URI``, else
``sqlite:///mlruns.db`` in the working directory (the default of
:mod:`kvcast.training.tracking`). mlflow's global URIs are pointed at it for the lookup (logged
models resolve through them) and the process environment is left as it was found
(``mlflow.set_tracking_uri`` also writes ``MLFLOW_TRACKING_URI``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from kvcast.predictor.model_meta import ModelFormatError

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


def download_model(text: str, tracking_uri: str | None = None) -> Path:
    """The local path of the ONNX file behind ``text``; one-line errors."""
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI
    with environment_kept():
        return _download(text, uri)


def _download(text: str, uri: str) -> Path:
    import mlflow
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    mlflow.set_tracking_uri(uri)  # logged models (models:/m-...) resolve through the global URI
    mlflow.set_registry_uri(uri)
    try:
        source = text
        if text.startswith("models:/"):
            client = MlflowClient(tracking_uri=uri, registry_uri=uri)
            ref = text.removeprefix("models:/")
            if "@" in ref:
                name, alias = ref.split("@", 1)
                version = client.get_model_version_by_alias(name, alias)
            else:
                name, _, number = ref.partition("/")
                version = client.get_model_version(name, number)
            source = version.source
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=source, tracking_uri=uri))
    except (MlflowException, SQLAlchemyError, OSError) as err:  # what a failing store raises
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ModelFormatError(f"{text}: {reason} (registry {uri})") from None
    found = [local] if local.is_file() else sorted(local.rglob("*.onnx"))
    if not found:
        raise ModelFormatError(f"{text}: the registered artefact holds no .onnx file")
    return found[0]
