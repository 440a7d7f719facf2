"""Write a fitted model as a self-describing ONNX file and prove it scores like the native one.

The graph comes from the model kind (``to_onnx``); the metadata (feature spec, calibration
table, missing-value rule, recency baseline, provenance) from :class:`ModelMeta`. Loading the
written file back through :class:`OnnxScorer` and comparing raw scores with the native model
on the test window is part of every export (:func:`export_checked`; ``onnx_parity_max_abs``,
in the metrics and the model card), and enforced: a gap above the run's tolerance
(``export.parity_tolerance``), or a NaN one, raises :class:`ParityError` and the file never
takes the model's name.

The file is written atomically (a temporary file beside it, fsynced, checked, then renamed
over it): a sidecar reloading it meanwhile reads the old model or the new one, never half of
one, and never one that failed its check.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from kvcast.predictor.model_meta import ModelMeta
from kvcast.predictor.scorer import OnnxScorer, read_model
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


class ParityError(ValueError):
    """The exported ONNX graph does not score like the fitted model: the export is refused
    (a ValueError, as every refusal of a run that cannot give a sound model)."""

    def __init__(self, kind: str, gap: float, tolerance: float) -> None:
        self.kind, self.gap, self.tolerance = kind, gap, tolerance
        by = f"by up to {gap:.3g}" if gap == gap else "by NaN (a score is not a number)"
        super().__init__(
            f"ONNX export of the {kind} model refused: onnxruntime's raw scores differ from the "
            f"fitted model's {by} on the test window, over export.parity_tolerance="
            f"{tolerance:g}; no model was written or registered"
        )


@dataclass(frozen=True)
class Export:
    proto: onnx.ModelProto
    scorer: OnnxScorer  # loaded from the file written
    gap: float  # onnx_parity_max_abs


def onnx_model(fitted: FittedModel, meta: ModelMeta) -> onnx.ModelProto:
    proto = with_metadata(fitted.to_onnx(), meta)
    onnx.checker.check_model(proto)
    return proto


def write_onnx(fitted: FittedModel, meta: ModelMeta, path: Path) -> onnx.ModelProto:
    """Write the model unchecked (:func:`export_checked` is the training run's export)."""
    proto = onnx_model(fitted, meta)
    write_atomic(path, proto.SerializeToString())
    return proto


def export_checked(
    fitted: FittedModel,
    meta: ModelMeta,
    path: Path,
    x: np.ndarray,
    idx: np.ndarray,
    windows: np.ndarray | None,
    tolerance: float,
) -> Export:
    """Export ``fitted`` to ``path`` if, read back from the written bytes, it scores rows
    ``idx`` of ``x`` (their ``windows`` for a sequence model) like the native model within
    ``tolerance``. Checked under a temporary name: on success the file is renamed over
    ``path``; on failure it is
    removed and :class:`ParityError` raised, ``path`` (an earlier model) left as it was."""
    proto = onnx_model(fitted, meta)
    with staged(path, proto.SerializeToString()) as candidate:
        scorer = OnnxScorer.from_bytes(
            read_model(candidate), str(path), expected=meta.spec, path=str(candidate)
        )
        gap = parity(fitted, scorer, x, idx, windows)
        if not gap <= tolerance:  # NaN too
            raise ParityError(fitted.kind, gap, tolerance)
    return Export(proto, scorer, gap)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` in one rename (the temporary file is removed on failure)."""
    with staged(path, data):
        pass


@contextlib.contextmanager
def staged(path: Path, data: bytes) -> Iterator[Path]:
    """``data`` in a new temporary file beside ``path``, fsynced, for the block to check;
    renamed over ``path`` when the block ends, removed if it raises."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        yield tmp
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
