"""The training table on disk: Parquet with the feature spec and provenance in its metadata
(the trace and config hashes, and the feature config itself: its label horizon is what a model
trained on the file predicts within, and how far the time split must purge), and the summary
the CLI prints.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from kvcast.features.config import FeatureConfig
from kvcast.features.spec import FeatureSpec

DATASET_FILE = "features.parquet"
META_SPEC = b"kvcast.feature_spec"
META_SPEC_DIGEST = b"kvcast.feature_spec_digest"
META_TRACE = b"kvcast.trace_hash"
META_CONFIG = b"kvcast.config_hash"
META_BAD = b"kvcast.bad_input"
META_FEATURE_CONFIG = b"kvcast.feature_config"


def file_hash(path: str | Path) -> str:
    """sha256 of a file's bytes (the ``trace_hash`` of a dataset), first 16 hex digits."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def dataset_metadata(
    spec: FeatureSpec,
    trace_hash: str,
    config_hash: str,
    bad_input: dict[str, int],
    feature_config: FeatureConfig | None = None,
) -> dict[bytes, bytes]:
    """The Parquet schema metadata of a feature dataset (the feature config when given)."""
    meta = {
        META_SPEC: spec.to_json().encode(),
        META_SPEC_DIGEST: spec.digest.encode(),
        META_TRACE: trace_hash.encode(),
        META_CONFIG: config_hash.encode(),
        META_BAD: json.dumps(bad_input).encode(),
    }
    if feature_config is not None:
        meta[META_FEATURE_CONFIG] = feature_config.model_dump_json().encode()
    return meta


def write_feature_dataset(
    df: pd.DataFrame,
    out_dir: str | Path,
    spec: FeatureSpec,
    trace_hash: str,
    config_hash: str,
    feature_config: FeatureConfig | None = None,
) -> Path:
    """Write ``out_dir/features.parquet``; refuses a frame whose columns miss spec features.
    ``feature_config``: the config the table was made with, recorded for training."""
    missing = [n for n in spec.names if n not in df.columns]
    if missing:
        raise ValueError(f"dataset lacks spec features: {', '.join(missing)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pandas(df, preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta |= dataset_metadata(
        spec, trace_hash, config_hash, df.attrs.get("bad_input", {}), feature_config
    )
    path = out / DATASET_FILE
    pq.write_table(table.replace_schema_metadata(meta), path)
    return path


def read_feature_dataset(path: str | Path) -> tuple[pd.DataFrame, FeatureSpec, dict[str, str]]:
    """The frame, its spec, and its provenance (``trace_hash``, ``config_hash``, and
    ``feature_config``, its JSON, when the file records it)."""
    p = Path(path)
    if p.is_dir():
        p = p / DATASET_FILE
    if not p.is_file():
        raise FileNotFoundError(
            f"{p}: no such feature dataset (`kvcast features --out DIR` writes DIR/{DATASET_FILE})"
        )
    try:
        table = pq.read_table(p)
    except (OSError, pa.ArrowException) as err:  # a trace, say: `kvcast train --trace` reads one
        raise ValueError(f"{p}: not a Parquet feature dataset (`kvcast features` writes one; "
                         f"a trace goes to --trace): {err}") from None  # fmt: skip
    meta = table.schema.metadata or {}
    if META_SPEC not in meta:
        raise ValueError(f"{p}: not a kvcast feature dataset (no feature spec in its metadata)")
    spec = FeatureSpec.from_json(meta[META_SPEC].decode())
    info = {"trace_hash": meta[META_TRACE].decode(), "config_hash": meta[META_CONFIG].decode()}
    if META_FEATURE_CONFIG in meta:
        info["feature_config"] = meta[META_FEATURE_CONFIG].decode()
    return table.to_pandas(), spec, info


def summarise(df: pd.DataFrame, spec: FeatureSpec | None = None) -> dict[str, Any]:
    """Rows, positives (raw and weighted rate), per-feature null rate, bad-input counters."""
    names = (
        list(spec.names)
        if spec is not None
        else [
            c
            for c in df.columns
            if c not in ("tick_ms", "block", "home_node", "weight") and not c.startswith("label_")
        ]
    )
    n = len(df)
    pos = df["label_burst"].to_numpy() > 0
    positives = int(np.count_nonzero(pos))
    weight = df["weight"].to_numpy() if "weight" in df else None
    weighted = float((weight * pos).sum() / weight.sum()) if n and weight is not None else None
    # no rows: no rates (a rate of 0 would read as "none positive", "never null")
    nulls = {k: float(v) for k, v in df[names].isna().mean().items()} if n else dict.fromkeys(names)
    return {
        "rows": n,
        "positives": positives,
        "positives_rate": positives / n if n else None,
        "positives_rate_weighted": weighted,
        "null_rate": nulls,
        "bad_input": dict(df.attrs.get("bad_input", {})),
    }
