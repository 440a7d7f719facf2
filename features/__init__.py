"""Signals and labels derived from request traces and live events.

One incremental state for the simulator and the sidecar (:class:`FeatureState`), one vectorised
pipeline for training tables (:func:`build_feature_dataset`), proven equal by a parity test; the
feature names, units and order are declared once (:func:`build_spec`).
"""

from kvcast.features.config import FeatureConfig, load_feature_config
from kvcast.features.dataset import read_feature_dataset, summarise, write_feature_dataset
from kvcast.features.offline.ingest import event_table
from kvcast.features.offline.pipeline import build_feature_dataset
from kvcast.features.offline.table import EventTable
from kvcast.features.online.state import FeatureState
from kvcast.features.spec import FeatureSpec, SpecMismatch, build_spec

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
