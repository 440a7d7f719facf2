"""Resolve an MLflow model URI (``models:/name@alias``, ``models:/name/version``) to a local
ONNX file. mlflow is imported only here, and only when such a URI is used: the registry is an
edge of the serving path, not part of it.

Registry: ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlruns.db`` in the working directory
(the default of :mod:`kvcast.training.tracking`).
"""

from __future__ import annotations

import os
from pathlib import Path

from kvcast.predictor.model_meta import ModelFormatError

DEFAULT_TRACKING_URI = "sqlite:///mlruns.db"


def is_model_uri(text: str) -> bool:
    return text.startswith(("models:/", "runs:/"))


def download_model(text: str) -> Path:
    """The local path of the ONNX file behind ``text``; one-line errors."""
    import mlflow
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    from sqlalchemy.exc import SQLAlchemyError

    uri = os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI
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
