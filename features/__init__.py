"""Signals and labels derived from request traces and live events.

One incremental state for the simulator and the sidecar (:class:`FeatureState`), one vectorised
pipeline for training tables (:func:`build_feature_dataset`), proven equal by a parity test; the
feature names, units and order are declared once (:func:`build_spec`).

The names below load on first use, so that importing a submodule (the trace loaders, the event
types) does not pull in the whole pipeline and its Parquet machinery.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "FeatureConfig": "kvcast.features.config",
    "load_feature_config": "kvcast.features.config",
    "read_feature_dataset": "kvcast.features.dataset",
    "summarise": "kvcast.features.dataset",
    "write_feature_dataset": "kvcast.features.dataset",
    "event_table": "kvcast.features.offline.ingest",
    "build_feature_dataset": "kvcast.features.offline.pipeline",
    "EventTable": "kvcast.features.offline.table",
    "FeatureState": "kvcast.features.online.state",
    "FeatureSpec": "kvcast.features.spec",
    "SpecMismatch": "kvcast.features.spec",
    "build_spec": "kvcast.features.spec",
}

__all__ = [
    "EventTable",
    "FeatureConfig",
    "FeatureSpec",
    "FeatureState",
    "SpecMismatch",
    "build_feature_dataset",
    "build_spec",
    "event_table",
    "load_feature_config",
    "read_feature_dataset",
    "summarise",
    "write_feature_dataset",
]

if TYPE_CHECKING:
    from kvcast.features.config import FeatureConfig, load_feature_config
    from kvcast.features.dataset import read_feature_dataset, summarise, write_feature_dataset
    from kvcast.features.offline.ingest import event_table
    from kvcast.features.offline.pipeline import build_feature_dataset
    from kvcast.features.offline.table import EventTable
    from kvcast.features.online.state import FeatureState
    from kvcast.features.spec import FeatureSpec, SpecMismatch, build_spec


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvcast.features' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
