"""What a kvcast ONNX model declares about itself, stored in its ``metadata_props``.

Every exported model, whatever its kind, has one float input (``[n, F]`` rows, or ``[n, L, F]``
windows for sequence models) and one output of raw scores (``[n]`` or ``[n, 1]``); the rest is
metadata, read here without importing onnx (onnxruntime exposes it):

- ``kvcast.kind``, ``kvcast.version``: model kind and the kvcast version that wrote it;
- ``kvcast.feature_spec``: the spec JSON (:class:`FeatureSpec`), checked by the scorer;
- ``kvcast.input`` / ``kvcast.output`` / ``kvcast.window``: graph names and L (0: flat rows);
- ``kvcast.calibration``: the post-step table (:class:`Calibration`);
- ``kvcast.missing``: how NaN features are scored (documentation; the graph implements it);
- ``kvcast.fallback``: probability for a row whose score is still not finite (training rate);
- ``kvcast.baseline_recency``: the recency table fitted on the same training window;
- ``kvcast.feature_config``, ``kvcast.trace_hash``, ``kvcast.config_hash``, ``kvcast.train_window``:
  provenance, used by ``kvcast score`` to rebuild features the way training did; the
  feature config's label horizon is what the model's probability is *within*, and a decider
  with another window refuses the model (:meth:`ModelMeta.require_horizon`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from kvcast.features.config import FeatureConfig
from kvcast.features.spec import FeatureSpec
from kvcast.predictor.calibration import Calibration
from kvcast.predictor.recency_table import RecencyTable

PREFIX = "kvcast."
REQUIRED = ("kind", "feature_spec", "input", "output", "window", "calibration", "fallback")


class ModelFormatError(ValueError):
    """A model file is not a usable kvcast ONNX model; the message says why."""


class HorizonMismatch(ValueError):
    """A model predicts a use within a different horizon than the decider acts on."""


@dataclass(frozen=True)
class ModelMeta:
    kind: str
    spec: FeatureSpec
    input: str = "features"
    output: str = "score"
    window: int = 0
    calibration: Calibration = field(default_factory=Calibration)
    missing: str = "the graph handles NaN"
    fallback: float = 0.0
    baseline: RecencyTable | None = None
    version: str = ""
    extra: Mapping[str, str] = field(default_factory=dict)  # provenance, free-form

    def to_props(self) -> dict[str, str]:
        props = {
            "kind": self.kind,
            "version": self.version,
            "feature_spec": self.spec.to_json(),
            "feature_spec_digest": self.spec.digest,
            "input": self.input,
            "output": self.output,
            "window": str(self.window),
            "calibration": self.calibration.to_json(),
            "missing": self.missing,
            "fallback": repr(float(self.fallback)),
        }
        if self.baseline is not None:
            props["baseline_recency"] = self.baseline.to_json()
        props |= dict(self.extra)
        return {PREFIX + k: v for k, v in props.items()}

    @property
    def feature_config(self) -> FeatureConfig | None:
        """The feature config the model was trained with (provenance), None when it records
        none; ``ValueError`` when the recorded one is not a valid config."""
        text = self.extra.get("feature_config", "")
        return FeatureConfig.model_validate_json(text) if text else None

    @property
    def label_horizon_ms(self) -> float | None:
        """H of the labels the model was trained on (its P is of a use within H), from the
        feature config it records; None when it records none (or an unreadable one)."""
        try:
            fcfg = self.feature_config
        except ValueError:
            return None
        return None if fcfg is None else fcfg.labels.horizon_ms

    def require_horizon(self, window_ms: float, source: str = "model") -> None:
        """Raise :class:`HorizonMismatch` unless the model's label horizon is ``window_ms``
        (the decider's prediction window: its P(hit), replica TTLs and load forecast all
        read the probability as "within the window"). A model that records no horizon
        passes."""
        horizon = self.label_horizon_ms
        if horizon is not None and not math.isclose(horizon, window_ms, rel_tol=1e-9):
            raise HorizonMismatch(
                f"{source}: the model predicts a use within {horizon:g} ms (its labels' "
                f"horizon_ms), but the decider's window_ms is {window_ms:g}: set window_ms: "
                f"{horizon:g} in the decider config, or retrain with labels.horizon_ms: "
                f"{window_ms:g}"
            )

    @classmethod
    def from_props(cls, props: Mapping[str, str], source: str = "model") -> ModelMeta:
        mine = {k.removeprefix(PREFIX): v for k, v in props.items() if k.startswith(PREFIX)}
        absent = [PREFIX + k for k in REQUIRED if k not in mine]
        if absent:
            raise ModelFormatError(
                f"{source}: not a kvcast model (metadata lacks {', '.join(absent)})"
            )
        try:
            spec = FeatureSpec.from_json(mine["feature_spec"])
            calib = Calibration.from_json(mine["calibration"])
            base = mine.get("baseline_recency")
            baseline = RecencyTable.from_json(base) if base else None
            window, fallback = int(mine["window"]), float(mine["fallback"])
            if not 0.0 <= fallback <= 1.0:  # NaN too: it stands in for a probability
                raise ValueError(f"fallback must be a probability in [0, 1], got {fallback!r}")
        except (ValueError, KeyError, TypeError, json.JSONDecodeError) as err:
            raise ModelFormatError(f"{source}: unreadable kvcast metadata: {err}") from None
        known = {*REQUIRED, "version", "missing", "baseline_recency", "feature_spec_digest"}
        return cls(
            kind=mine["kind"],
            spec=spec,
            input=mine["input"],
            output=mine["output"],
            window=window,
            calibration=calib,
            missing=mine.get("missing", ""),
            fallback=fallback,
            baseline=baseline,
            version=mine.get("version", ""),
            extra={k: v for k, v in mine.items() if k not in known},
        )
