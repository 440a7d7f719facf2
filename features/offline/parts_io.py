"""Join per-window Parquet parts into one ``features.parquet`` with the dataset metadata, a part
at a time (the client never holds more than one window's rows)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pyarrow.parquet as pq

from kvcast.features.dataset import (
    DATASET_FILE,
    META_BAD,
    META_CONFIG,
    META_SPEC,
    META_SPEC_DIGEST,
    META_TRACE,
)
from kvcast.features.spec import FeatureSpec


def join_parts(
    parts: Sequence[str | Path],
    out_dir: str | Path,
    spec: FeatureSpec,
    trace_hash: str,
    config_hash: str,
    bad_input: dict[str, int],
) -> Path:
    """Write ``out_dir/features.parquet`` from ``parts`` (in order), readable by
    :func:`kvcast.features.read_feature_dataset`."""
    if not parts:
        raise ValueError("no feature parts to join (the trace produced no ticks)")
    schema = pq.read_schema(parts[0])
    meta = dict(schema.metadata or {})
    meta |= {
        META_SPEC: spec.to_json().encode(),
        META_SPEC_DIGEST: spec.digest.encode(),
        META_TRACE: trace_hash.encode(),
        META_CONFIG: config_hash.encode(),
        META_BAD: json.dumps(bad_input).encode(),
    }
    path = Path(out_dir) / DATASET_FILE
    with pq.ParquetWriter(path, schema.with_metadata(meta)) as writer:
        for p in parts:
            writer.write_table(pq.read_table(p).replace_schema_metadata(meta))
    return path
