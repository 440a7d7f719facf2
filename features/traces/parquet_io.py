"""kvcast's own Parquet form of a trace: the canonical columns plus trace-wide metadata.

The file's schema metadata holds ``kvcast.block_size`` and ``kvcast.name``; writing then
reading gives back the same table, name and block size. A file from elsewhere needs only the
columns a request cannot do without (``arrival_ms``, ``input_tokens``, ``output_tokens``,
``block_hashes``); the others are filled as the JSONL loader fills them when absent (ids
made up, the default tenant, no session or chat ids).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kvcast.features.traces.block_ids import ID_RANGE, is_block_id
from kvcast.features.traces.source import trace_name
from kvcast.features.traces.table import (
    COLUMNS,
    LoadReport,
    Trace,
    TraceError,
    make_table,
    sort_by_arrival,
)

DEFAULT_BLOCK_SIZE = 512
BLOCK_SIZE_KEY = b"kvcast.block_size"
NAME_KEY = b"kvcast.name"
SCHEMA = pa.schema(
    [
        ("arrival_ms", pa.float64()),
        ("request_id", pa.string()),
        ("tenant", pa.string()),
        ("session", pa.string()),
        ("input_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("block_hashes", pa.list_(pa.int64())),
        ("chat_id", pa.int64()),
        ("parent_chat_id", pa.int64()),
    ]
)
_NULLABLE = frozenset({"session", "chat_id", "parent_chat_id"})
OPTIONAL = frozenset({"request_id", "tenant", *_NULLABLE})  # filled when the file lacks them


def _flat_hashes(lists: list[list[int]], total: int) -> pa.Array:
    """Every hash in order: int64 when all fit (the common case), else uint64 (vLLM's u64
    hashes); a column cannot hold a negative and a u64 above ``2**63 - 1`` exactly, so such a
    table is refused, as is a hash beyond 64 bits."""
    try:
        flat = np.fromiter((h for hashes in lists for h in hashes), np.int64, total)
        return pa.array(flat, pa.int64())
    except OverflowError:
        pass
    values = [int(h) for hashes in lists for h in hashes]
    bad = next((h for h in values if not is_block_id(h)), None)
    if bad is not None:
        raise ValueError(f"block hash {bad} is not a 64-bit block id ({ID_RANGE})")
    low, high = min(values), max(values)
    if low < 0:
        raise ValueError(
            f"block hashes {low} and {high} cannot share one Parquet column: it holds int64 "
            "(negative ids) or uint64 (ids above 2**63 - 1), not both"
        )
    return pa.array(np.array(values, dtype=np.uint64), pa.uint64())


def _block_hashes_array(lists: list[list[int]]) -> pa.ListArray:
    lengths = np.fromiter(map(len, lists), np.int64, len(lists))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    if offsets[-1] >= 2**31:
        raise ValueError(f"too many block hashes for one Parquet column: {offsets[-1]}")
    offsets = offsets.astype(np.int32)
    flat = _flat_hashes(lists, int(offsets[-1]))
    return pa.ListArray.from_arrays(pa.array(offsets), flat)


def write_parquet(trace: Trace, path: str | Path) -> Path:
    """Write ``trace`` as kvcast Parquet; returns the path written. Block hashes are stored as
    ``list<int64>``, or as ``list<uint64>`` when some are u64 above ``2**63 - 1``."""
    df = trace.requests
    out = Path(path)
    try:
        hashes = _block_hashes_array(list(df["block_hashes"]))
    except ValueError as exc:
        raise ValueError(f"{out}: {exc}") from None
    arrays = [
        hashes if c == "block_hashes" else pa.array(df[c], SCHEMA.field(c).type) for c in COLUMNS
    ]
    schema = SCHEMA.set(COLUMNS.index("block_hashes"), pa.field("block_hashes", hashes.type))
    meta = {BLOCK_SIZE_KEY: str(trace.block_size).encode(), NAME_KEY: trace.name.encode()}
    table = pa.Table.from_arrays(arrays, schema=schema.with_metadata(meta))
    pq.write_table(table, out)
    return out


def _accepts(name: str, actual: pa.DataType) -> bool:
    """Whether a column's stored type reads losslessly as its canonical type."""
    types = pa.types
    if name == "block_hashes":
        is_list = types.is_list(actual) or types.is_large_list(actual)
        return is_list and types.is_integer(actual.value_type)  # int64 or (u64 hashes) uint64
    if name == "arrival_ms":
        return types.is_floating(actual) or types.is_signed_integer(actual)
    if types.is_string(SCHEMA.field(name).type):
        return types.is_string(actual) or types.is_large_string(actual)
    return types.is_signed_integer(actual)


def _decoded(table: pa.Table) -> pa.Table:
    """The canonical columns that are dictionary-encoded (pandas categoricals, say) as plain
    arrays of their values."""
    for name in COLUMNS:
        if name in table.column_names:
            i = table.schema.get_field_index(name)
            kind = table.schema.field(i).type
            if pa.types.is_dictionary(kind):
                table = table.set_column(i, name, table.column(i).cast(kind.value_type))
    return table


def _check_column(path: Path, table: pa.Table, name: str) -> None:
    if name not in table.column_names:
        raise TraceError(
            f"{path}: missing column {name!r} (columns: {', '.join(table.column_names)})"
        )
    actual, wanted = table.schema.field(name).type, SCHEMA.field(name).type
    if not _accepts(name, actual):
        raise TraceError(f"{path}: column {name!r} has type {actual}, expected {wanted}")
    column = table.column(name)
    nulls = column.null_count if name not in _NULLABLE else 0
    if name == "block_hashes":
        nulls += sum(chunk.flatten().null_count for chunk in column.chunks)
    if nulls:
        raise TraceError(f"{path}: column {name!r} has {nulls} nulls")


def _lists(column: pa.ChunkedArray) -> list[list[int]]:
    array = column.combine_chunks()
    flat = array.flatten().to_numpy().tolist()
    ends = np.cumsum(array.value_lengths().to_numpy()).tolist()
    starts = [0, *ends[:-1]]
    return [flat[a:b] for a, b in zip(starts, ends, strict=True)]


def _check_values(path: Path, df_arrival: np.ndarray, counts: dict[str, np.ndarray]) -> None:
    if not np.isfinite(df_arrival).all():
        raise TraceError(f"{path}: column 'arrival_ms' has non-finite values")
    if len(df_arrival) and df_arrival.min() < 0:  # as a Mooncake timestamp: ms since the start
        raise TraceError(f"{path}: column 'arrival_ms' has negative values")
    for name, values in counts.items():
        if len(values) and values.min() < 0:
            raise TraceError(f"{path}: column {name!r} has negative values")


def read_parquet(
    path: str | Path, *, name: str | None = None, block_size: int | None = None
) -> Trace:
    """Read kvcast Parquet; a missing or mistyped canonical column is a ``TraceError``."""
    p = Path(path)
    try:
        table = pq.read_table(p)
    except FileNotFoundError:
        raise TraceError(f"{p}: no such file") from None
    except (OSError, pa.ArrowException) as exc:
        raise TraceError(f"{p}: not a readable Parquet file ({exc})") from None
    table = _decoded(table)
    given = [c for c in COLUMNS if c not in OPTIONAL or c in table.column_names]
    if len(table) == 0 and set(given) <= set(table.column_names):  # (an empty table's
        raise TraceError(f"{p}: contains no requests")  # columns may be typed null)
    for column in given:
        _check_column(p, table, column)
    arrival = table.column("arrival_ms").to_numpy().astype(np.float64)
    counts = {c: table.column(c).to_numpy() for c in ("input_tokens", "output_tokens")}
    _check_values(p, arrival, counts)
    ids = table.column("request_id").to_pylist() if "request_id" in given else None
    if ids is not None and len(set(ids)) != len(ids):
        raise TraceError(f"{p}: column 'request_id' has duplicate ids")
    df = make_table(
        arrival_ms=arrival,
        input_tokens=counts["input_tokens"],
        output_tokens=counts["output_tokens"],
        block_hashes=_lists(table.column("block_hashes")),
        request_id=ids,
        **{
            c: table.column(c).to_pylist()
            for c in ("tenant", "session", "chat_id", "parent_chat_id")
            if c in given
        },
    )
    requests, reordered = sort_by_arrival(df)
    meta = table.schema.metadata or {}
    try:
        stored_size = int(meta.get(BLOCK_SIZE_KEY, DEFAULT_BLOCK_SIZE))
        if stored_size <= 0:
            raise ValueError
    except ValueError:
        raise TraceError(f"{p}: bad {BLOCK_SIZE_KEY.decode()} {meta[BLOCK_SIZE_KEY]!r}") from None
    try:
        stored_name = meta.get(NAME_KEY, b"").decode()
    except UnicodeDecodeError:
        raise TraceError(f"{p}: bad {NAME_KEY.decode()} {meta[NAME_KEY]!r}") from None
    return Trace(
        requests=requests,
        name=name or stored_name or trace_name(p),
        block_size=block_size or stored_size,
        source=str(p),
        report=LoadReport(lines=len(df), reordered=reordered),
    )
