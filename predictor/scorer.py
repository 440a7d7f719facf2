"""The ONNX scorer: a kvcast model file (or MLflow model URI) -> calibrated burst probabilities.

Serving path: numpy and onnxruntime only (no torch, lightgbm or mlflow at import time; a
``models:/name@alias`` URI imports mlflow lazily to download the artefact). Every model kind is
served the same way: the graph maps feature rows ``[n, F]`` (or windows ``[n, L, F]``) to raw
scores, then the declared calibration table maps those to probabilities (:mod:`.calibration`).

Missing values: non-finite inputs (NaN, +-inf) are passed to the graph as NaN, which every kind
handles in-graph as its metadata's ``kvcast.missing`` says (LightGBM: each split's learned
default branch; rule: a signal whose inputs are missing does not fire; recency: the last bin;
tcn: imputed with training medians). A row whose probability is still not finite gets the
model's ``kvcast.fallback`` probability: one bad row never fails a batch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from kvcast.features.spec import FeatureSpec
from kvcast.predictor.model_meta import ModelFormatError, ModelMeta
from kvcast.predictor.model_uri import Downloaded, fetch_model, is_model_uri

MODEL_FILE = "model.onnx"


def locate_model(model: str | Path, tracking_uri: str | None = None) -> Downloaded:
    """The local ONNX file for ``PATH`` (a directory: its ``model.onnx``) or ``models:/...``,
    with the registry version a ``models:/`` URI resolved to (None for a path)."""
    text = str(model)
    if is_model_uri(text):
        return fetch_model(text, tracking_uri)
    path = Path(text)
    if path.is_dir():
        path = path / MODEL_FILE
    if not path.is_file():
        raise ModelFormatError(f"{path}: no such model file")
    return Downloaded(path, None)


def resolve_model(model: str | Path, tracking_uri: str | None = None) -> Path:
    """A local ONNX path for ``PATH`` or ``models:/name@alias`` / ``models:/name/version``
    (looked up in ``tracking_uri``, else ``$MLFLOW_TRACKING_URI``, else the local store)."""
    return locate_model(model, tracking_uri).path


def read_model(path: Path) -> bytes:
    """The bytes of a model file (one read: what is scored and what is hashed are the same)."""
    try:
        return path.read_bytes()
    except OSError as err:
        raise ModelFormatError(f"{path}: cannot read the model file ({err.strerror})") from None


def _session(model: bytes, threads: int, source: str) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime raises its own exception types for bad files
        reason = str(err).strip().splitlines()[0][:200]
        raise ModelFormatError(f"{source}: not a loadable ONNX model ({reason})") from None


class OnnxScorer:
    """A loaded model; :meth:`score` maps rows to calibrated probabilities."""

    def __init__(self, session: ort.InferenceSession, meta: ModelMeta, source: str) -> None:
        self.session, self.meta, self.source = session, meta, source
        inputs = {i.name: i for i in session.get_inputs()}
        outputs = [o.name for o in session.get_outputs()]
        if meta.input not in inputs:
            raise ModelFormatError(
                f"{source}: model has no input {meta.input!r} (its inputs: {', '.join(inputs)})"
            )
        if len(inputs) > 1:
            others = ", ".join(n for n in inputs if n != meta.input)
            raise ModelFormatError(f"{source}: model needs inputs the scorer cannot feed: {others}")
        if meta.output not in outputs:
            raise ModelFormatError(
                f"{source}: model has no output {meta.output!r} (its outputs: {', '.join(outputs)})"
            )
        shape = inputs[meta.input].shape
        if len(shape) != self.rank or (isinstance(shape[-1], int) and shape[-1] != len(meta.spec)):
            raise ModelFormatError(
                f"{source}: input {meta.input!r} has shape {shape}, but its feature spec "
                f"declares {self._expected_shape()}"
            )
        if meta.window > 0 and isinstance(shape[1], int) and shape[1] != meta.window:
            raise ModelFormatError(
                f"{source}: input {meta.input!r} takes windows of {shape[1]} rows (shape "
                f"{shape}), but its metadata declares kvcast.window {meta.window}"
            )

    @classmethod
    def load(
        cls, model: str | Path, *, expected: FeatureSpec | None = None, threads: int = 1,
        tracking_uri: str | None = None,
    ) -> OnnxScorer:  # fmt: skip
        """Load a file or MLflow URI (from ``tracking_uri``'s registry when given); refuse it
        if its spec differs from ``expected``."""
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        path = resolve_model(model, tracking_uri)
        return cls.from_bytes(
            read_model(path), str(model), expected=expected, threads=threads, path=str(path)
        )

    @classmethod
    def from_bytes(
        cls, data: bytes, source: str, *, expected: FeatureSpec | None = None, threads: int = 1,
        path: str | None = None,
    ) -> OnnxScorer:  # fmt: skip
        """Load the model serialised in ``data`` (``source`` names it in errors; ``path``, the
        file it was read from, names it when it is not a loadable ONNX model)."""
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        session = _session(data, threads, path or source)
        meta = ModelMeta.from_props(session.get_modelmeta().custom_metadata_map, source)
        scorer = cls(session, meta, source)
        if expected is not None:
            scorer.check_spec(expected)
        return scorer

    @property
    def kind(self) -> str:
        return self.meta.kind

    @property
    def spec(self) -> FeatureSpec:
        return self.meta.spec

    @property
    def window(self) -> int:
        return self.meta.window

    @property
    def rank(self) -> int:
        return 3 if self.meta.window > 0 else 2

    def _expected_shape(self) -> str:
        f = len(self.meta.spec)
        return f"[n, {self.meta.window}, {f}]" if self.meta.window > 0 else f"[n, {f}]"

    def check_spec(self, expected: FeatureSpec) -> None:
        """Raise :class:`SpecMismatch` naming every feature that differs."""
        expected.require_equal(self.meta.spec)

    def _prepare(self, rows: np.ndarray) -> np.ndarray:
        try:
            x = np.asarray(rows, dtype=np.float32)
        except (TypeError, ValueError) as err:
            raise ValueError(f"rows must be numeric: {err}") from None
        if x.ndim == self.rank - 1:
            x = x[None]
        f = len(self.meta.spec)
        ok = x.ndim == self.rank and x.shape[-1] == f
        if ok and self.meta.window > 0:
            ok = x.shape[1] == self.meta.window
        if not ok:
            raise ValueError(
                f"rows have shape {tuple(x.shape)} ({x.shape[-1] if x.ndim else 0} features); "
                f"model {self.meta.kind} expects {self._expected_shape()} "
                f"(feature spec {self.meta.spec.digest})"
            )
        inf = np.isinf(x)  # NaN passes through as it is; only infinities become NaN
        if inf.any():
            x = np.where(inf, np.float32(np.nan), x)
        return np.ascontiguousarray(x)

    def raw(self, rows: np.ndarray) -> np.ndarray:
        """The graph's raw output per row (before calibration)."""
        x = self._prepare(rows)
        if len(x) == 0:
            return np.zeros(0)
        out = self.session.run([self.meta.output], {self.meta.input: x})[0]
        return np.asarray(out, dtype=np.float64).reshape(len(x), -1)[:, 0]

    def score(self, rows: np.ndarray) -> np.ndarray:
        """Calibrated burst probability per row (``[n]`` float64)."""
        p = self.meta.calibration.apply(self.raw(rows))
        p[~np.isfinite(p)] = self.meta.fallback
        return p
