"""Join per-window Parquet parts into one ``features.parquet`` with the dataset metadata, a part
at a time (the client never holds more than one window's rows)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow.parquet as pq

from kvcast.features.config import FeatureConfig
from kvcast.features.dataset import DATASET_FILE, dataset_metadata
from kvcast.features.spec import FeatureSpec


def join_parts(
    parts: Sequence[str | Path],
    out_dir: str | Path,
    spec: FeatureSpec,
    trace_hash: str,
    config_hash: str,
    bad_input: dict[str, int],
    feature_config: FeatureConfig | None = None,
) -> Path:
    """Write ``out_dir/features.parquet`` from ``parts`` (in order), readable by
    :func:`kvcast.features.read_feature_dataset`."""
    if not parts:
        raise ValueError("no feature parts to join (the trace produced no ticks)")
    schema = pq.read_schema(parts[0])
    meta = dict(schema.metadata or {})
    meta |= dataset_metadata(spec, trace_hash, config_hash, bad_input, feature_config)
    path = Path(out_dir) / DATASET_FILE
    with pq.ParquetWriter(path, schema.with_metadata(meta)) as writer:
        for p in parts:
            writer.write_table(pq.read_table(p).replace_schema_metadata(meta))
    return path
