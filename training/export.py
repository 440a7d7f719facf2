"""Write a fitted model as a self-describing ONNX file and prove it scores like the native one.

The graph comes from the model kind (``to_onnx``); the metadata (feature spec, calibration
table, missing-value rule, recency baseline, provenance) from :class:`ModelMeta`. Loading the
written file back through :class:`OnnxScorer` and comparing raw scores with the native model
on the test window is part of every export (``onnx_parity_max_abs``, in the metrics and the
model card; reported, not enforced: every metric is computed through the ONNX file itself).

The file is written atomically (a temporary file beside it, fsynced, then renamed over it): a
sidecar reloading it meanwhile reads the old model or the new one, never half of one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

import numpy as np
import onnx

from kvcast.predictor.model_meta import ModelMeta
from kvcast.predictor.scorer import OnnxScorer
from kvcast.training.evaluate import predict_rows
from kvcast.training.registry import FittedModel


def with_metadata(model: onnx.ModelProto, meta: ModelMeta) -> onnx.ModelProto:
    props = meta.to_props()
    kept = [p for p in model.metadata_props if p.key not in props]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    for key, value in props.items():
        model.metadata_props.add(key=key, value=value)
    return model


def write_onnx(fitted: FittedModel, meta: ModelMeta, path: Path) -> onnx.ModelProto:
    proto = with_metadata(fitted.to_onnx(), meta)
    onnx.checker.check_model(proto)
    write_atomic(path, proto.SerializeToString())
    return proto


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` in one rename (the temporary file is removed on failure)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # the rename itself survives a crash once fsynced
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def parity(
    fitted: FittedModel,
    scorer: OnnxScorer,
    x: np.ndarray,
    idx: np.ndarray,
    windows: np.ndarray | None = None,
    limit: int = 20_000,
) -> float:
    """Largest raw-score difference between native and ONNX on up to ``limit`` rows."""
    idx = idx[:limit]
    native = predict_rows(fitted.predict_raw, x, idx, fitted.window, windows)
    served = predict_rows(scorer.raw, x, idx, fitted.window, windows)
    return float(np.max(np.abs(native - served))) if len(idx) else 0.0
