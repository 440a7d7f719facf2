"""The training table: replay a trace into features (or read a features.parquet), split by time.

I/O lives here, at the edge: the trace, the simulator and feature configs, the Parquet file.
:class:`TrainingData` holds the feature matrix in spec order (float32, non-finite -> NaN, as
the scorer feeds it), the labels, the sampling weights and the time split.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvcast.features import build_feature_dataset, build_spec, read_feature_dataset
from kvcast.features.config import FeatureConfig, load_feature_config
from kvcast.features.dataset import file_hash
from kvcast.features.spec import FeatureSpec
from kvcast.features.traces import Trace, load_trace
from kvcast.predictor.windows import window_index
from kvcast.training.config import DataConfig, SplitConfig
from kvcast.training.splits import TimeSplit, time_split

log = logging.getLogger(__name__)


def open_trace(spec: str, fmt: str = "auto", skip_bad: bool = False) -> tuple[Trace, str]:
    """``PATH`` or ``bundled:NAME`` -> the trace and the sha256 prefix of its file."""
    if spec.startswith("bundled:"):
        from kvcast.data import bundled_trace_path

        path = bundled_trace_path(spec.removeprefix("bundled:"))
        return load_trace(path, fmt, skip_bad=skip_bad, name=spec.removeprefix("bundled:")), (
            file_hash(path)
        )
    return load_trace(spec, fmt, skip_bad=skip_bad), file_hash(spec)


def replay_features(
    trace: str,
    fcfg: FeatureConfig,
    *,
    fmt: str = "auto",
    skip_bad: bool = False,
    simulator_config: Path | None = None,
    policy: str = "dynamo_kv",
    time_scale: float = 1.0,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[pd.DataFrame, FeatureSpec, dict[str, str]]:
    """Replay ``trace`` under ``policy`` and build the feature table with ``fcfg``."""
    from kvcast.simulator.config import load_sim_config
    from kvcast.simulator.policies import policy_names
    from kvcast.simulator.recording import feature_config_for, record_events

    if policy not in policy_names():
        raise ValueError(f"unknown policy {policy!r}; valid: {', '.join(policy_names())}")
    sim = load_sim_config(simulator_config)
    tr, trace_hash = open_trace(trace, fmt, skip_bad)
    fcfg = feature_config_for(sim, tr, fcfg)
    events = record_events(tr, sim, policy, time_scale=time_scale, progress=progress)
    df = build_feature_dataset(events, fcfg.ticks, fcfg)
    info = {
        "trace_hash": trace_hash,
        "config_hash": fcfg.digest(),
        "feature_config": fcfg.model_dump_json(),
    }
    return df, build_spec(fcfg), info


def load_frame(cfg: DataConfig) -> tuple[pd.DataFrame, FeatureSpec, dict[str, str]]:
    """The table named by the data section (replayed, or read from ``cfg.features``)."""
    if cfg.features is not None:
        df, spec, info = read_feature_dataset(cfg.features)
        if not info.get("feature_config"):  # written elsewhere, or by kvcast before it recorded it
            log.warning(
                "%s records no feature config: the split purges split.purge_ms only, whatever "
                "the table's label horizon, and the model records no horizon (the sidecar and "
                "the simulator cannot check it); rebuild the table with kvcast features",
                cfg.features,
            )
        return df, spec, {"feature_config": ""} | info  # "": a file that records none
    fcfg = load_feature_config(cfg.features_config)
    if cfg.negative_keep is not None:
        sampling = fcfg.sampling.model_copy(update={"negative_keep": cfg.negative_keep})
        fcfg = fcfg.model_copy(update={"sampling": sampling})
    return replay_features(
        cfg.trace,
        fcfg,
        fmt=cfg.format,
        skip_bad=cfg.skip_bad,
        simulator_config=cfg.simulator_config,
        policy=cfg.policy,
        time_scale=cfg.time_scale,
    )


def feature_matrix(df: pd.DataFrame, spec: FeatureSpec) -> np.ndarray:
    """``[n, F]`` float32 in spec order; non-finite values become NaN (the scorer's rule)."""
    missing = [n for n in spec.names if n not in df.columns]
    if missing:
        raise ValueError(f"table lacks spec features: {', '.join(missing)}")
    x = np.empty((len(df), len(spec)), dtype=np.float32)
    for j, name in enumerate(spec.names):
        x[:, j] = df[name].to_numpy(dtype=np.float64, na_value=np.nan)
    x[~np.isfinite(x)] = np.nan
    return x


@dataclass(frozen=True, eq=False)
class TrainingData:
    frame: pd.DataFrame
    spec: FeatureSpec
    x: np.ndarray
    y: np.ndarray
    w: np.ndarray
    split: TimeSplit
    info: dict[str, str] = field(default_factory=dict)
    _windows: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        df: pd.DataFrame,
        spec: FeatureSpec,
        split: SplitConfig,
        label: str = "label_burst",
        info: dict[str, str] | None = None,
    ) -> TrainingData:
        labels = [c for c in df.columns if c.startswith("label_burst")]
        if label not in labels:
            raise ValueError(f"unknown label {label!r}; the table has {', '.join(labels)}")
        y = (df[label].to_numpy() > 0).astype(np.int8)
        w = df["weight"].to_numpy(np.float64) if "weight" in df else np.ones(len(df))
        horizon = label_horizon(info)  # a label looks this far ahead: purge at least that
        if horizon is not None and split.purge_ms < horizon:
            split = split.model_copy(update={"purge_ms": horizon})
        parts = time_split(df["tick_ms"].to_numpy(np.float64), split)
        return cls(df, spec, feature_matrix(df, spec), y, w, parts, dict(info or {}))

    @property
    def sampled(self) -> bool:
        return bool(np.any(self.w != 1.0))

    def rows(self, part: str) -> np.ndarray:
        return self.split.rows(part)

    def window_index(self, length: int) -> np.ndarray:
        """``[N, length]`` history indices of every row (computed once per length)."""
        if length not in self._windows:
            self._windows[length] = window_index(
                self.frame["block"].to_numpy(), self.frame["tick_ms"].to_numpy(), length
            )
        return self._windows[length]

    def column(self, name: str, idx: np.ndarray) -> np.ndarray:
        return self.frame[name].to_numpy()[idx]

    def describe(self) -> dict[str, Any]:
        return {
            "rows": len(self.y),
            "positives": int(self.y.sum()),
            **{f"{p}_rows": len(self.rows(p)) for p in ("train", "validation", "test")},
        }


def label_horizon(info: dict[str, str] | None) -> float | None:
    """The label horizon of the feature config the table was made with (None: not recorded,
    e.g. a features Parquet made elsewhere)."""
    text = (info or {}).get("feature_config", "")
    return FeatureConfig.model_validate_json(text).labels.horizon_ms if text else None
