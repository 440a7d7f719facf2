"""The model a local cluster scores with when ``--model`` is not given.

The default is the recency model that ``kvcast train --kind recency`` writes
(``kvcast-out/train/recency/model.onnx``, relative to the working directory; where the working
directory holds ``configs/train/recency.yaml``, that config's ``out_dir``, which ``kvcast train
--config configs/train/recency.yaml`` writes to); without one, starting is refused with a
one-line reason giving the command that makes it. An explicit ``--model`` is an ONNX file, a
folder holding ``model.onnx``, or an MLflow ``models:/name@alias``. A local model is checked
before any process starts (:func:`check_model`: a kvcast model whose feature spec is the
sidecar's), so that a bad one is one line, not a sidecar that dies while the agents come up; a
registry URI is left to the sidecar, which refuses it the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TRAIN_CONFIG = Path("configs/train/recency.yaml")
TRAIN_COMMAND = "kvcast train --kind recency"  # embedded defaults: works in any directory
TRAIN_WITH_CONFIG = f"kvcast train --config {TRAIN_CONFIG}"
DEFAULT_OUT_DIR = Path("kvcast-out/train/recency")  # the recency config's out_dir
MODEL_FILE = "model.onnx"


def recency_model_path(cwd: Path | None = None) -> Path:
    """Where the recency training run writes its model, read from its config when present."""
    base = Path.cwd() if cwd is None else cwd
    out_dir = DEFAULT_OUT_DIR
    config = base / TRAIN_CONFIG
    if config.is_file():
        try:
            from kvcast.training.config import load_train_config

            out_dir = load_train_config(config).output_dir
        except Exception:  # an unreadable config: the documented default still applies
            out_dir = DEFAULT_OUT_DIR
    return out_dir / MODEL_FILE if out_dir.is_absolute() else base / out_dir / MODEL_FILE


def choose_model(model: str | None, cwd: Path | None = None) -> str:
    """``model`` when given, else the trained recency model; a ValueError saying how to make
    one when there is none."""
    if model:
        if not model.startswith(("models:/", "runs:/")) and not Path(model).exists():
            raise ValueError(f"--model {model}: no such file")
        return model
    base = Path.cwd() if cwd is None else cwd
    path = recency_model_path(base)
    if not path.is_file():
        command = TRAIN_WITH_CONFIG if (base / TRAIN_CONFIG).is_file() else TRAIN_COMMAND
        raise ValueError(
            f"no --model given and no trained model at {path}: train one with "
            f"`{command}`, or pass --model PATH|models:/NAME@ALIAS"
        )
    return str(path)


def check_model(model: str, spec: Any) -> None:
    """Refuse (ValueError) a local ``model`` that is not a kvcast ONNX model for ``spec`` (a
    :class:`FeatureSpec`)."""
    if model.startswith(("models:/", "runs:/")):
        return
    from kvcast.predictor.scorer import OnnxScorer

    try:
        OnnxScorer.load(model, expected=spec)
    except ValueError as err:  # ModelFormatError, SpecMismatch
        raise ValueError(f"--model {model}: {err}") from None
    except Exception as err:  # onnxruntime cannot read it
        raise ValueError(f"--model {model}: not a usable ONNX model ({err})") from None
