"""The model the decision loop scores with, replaceable while the sidecar runs.

:meth:`ModelSlot.load` resolves and loads a new model (an ONNX path or an MLflow URI such as
``models:/kvcast-lgbm@champion``), refuses it when its feature spec differs from the running
feature state's (:class:`SpecMismatch` naming the model and every differing feature), when it
predicts within another horizon than the decider's window (:class:`HorizonMismatch`) or when
it is not a usable kvcast model (:class:`ModelFormatError`), and only then swaps it in: one
reference assignment, so a tick scores wholly with the old model or wholly with the new one,
and events keep flowing throughout (loading runs off the event loop and off the consumer
thread).

The file is read once: the session is built from those bytes and the digest computed from
them, so a file replaced mid-load never pairs one model's digest with another's session.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass

from kvcast.features.spec import FeatureSpec, SpecMismatch
from kvcast.predictor.model_meta import HorizonMismatch, ModelFormatError
from kvcast.predictor.scorer import OnnxScorer, locate_model, read_model

__all__ = ["HorizonMismatch", "LoadedModel", "ModelFormatError", "ModelInfo", "ModelSlot"]


@dataclass(frozen=True, slots=True)
class ModelInfo:
    source: str  # what was asked for: a path or models:/name@alias
    path: str  # the local ONNX file it resolved to
    kind: str
    version: str  # kvcast version that wrote it
    digest: str  # sha256 of the file, first 16 hex digits: identifies the model
    spec_digest: str
    loaded_at: float  # unix seconds
    registry_version: str | None = None  # the MLflow version a models:/ URI resolved to


@dataclass(frozen=True, slots=True)
class LoadedModel:
    scorer: OnnxScorer
    info: ModelInfo


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


class ModelSlot:
    def __init__(self, spec: FeatureSpec, window_ms: float | None = None) -> None:
        self.spec = spec
        self.window_ms = window_ms  # the decider's window (None: any model horizon)
        self.current: LoadedModel | None = None
        self.loads = 0  # models swapped in
        self.refused = 0  # load attempts refused (bad file, different spec or horizon)
        self._lock = threading.Lock()  # one load at a time

    def load(self, source: str) -> ModelInfo:
        """Load ``source`` and swap it in; raise (and keep the current model) when refused."""
        with self._lock:
            try:
                found = locate_model(source)
                path = found.path
                data = read_model(path)  # one read: the session and the digest share it
                scorer = OnnxScorer.from_bytes(data, str(path))
                self._check_spec(scorer, source)
                if scorer.window > 0:  # the tick scores one row per block
                    raise ModelFormatError(
                        f"{source}: a sequence model (window {scorer.window}, input "
                        f"[n, {scorer.window}, F]); the sidecar scores one feature row per "
                        "block: serve a rule or LightGBM model"
                    )
                if self.window_ms is not None:
                    scorer.meta.require_horizon(self.window_ms, source)
                digest = digest_of(data)
            except Exception:
                self.refused += 1
                raise
            meta = scorer.meta
            info = ModelInfo(
                source, str(path), meta.kind, meta.version, digest, meta.spec.digest, time.time(),
                found.registry_version,
            )  # fmt: skip
            self.current = LoadedModel(scorer, info)
            self.loads += 1
            return info

    def _check_spec(self, scorer: OnnxScorer, source: str) -> None:
        """:class:`SpecMismatch` naming ``source``, both specs and every differing feature."""
        try:
            scorer.check_spec(self.spec)
        except SpecMismatch as err:
            raise SpecMismatch(
                f"{source}: {err} (the sidecar's spec {self.spec.digest}, from its features "
                f"config; the other spec is the model's, {scorer.spec.digest}: serve a model "
                "trained with the sidecar's features config)"
            ) from None
