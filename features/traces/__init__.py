"""Request traces: load and validate Mooncake JSONL, Azure CSV and kvcast Parquet.

>>> from kvcast.features.traces import load_trace
>>> trace = load_trace("mooncake_conversation_dev.jsonl")  # doctest: +SKIP
"""

from kvcast.features.traces.loader import TRACE_FORMATS, detect_format, load_trace
from kvcast.features.traces.parquet_io import read_parquet, write_parquet
from kvcast.features.traces.table import COLUMNS, LoadReport, Trace, TraceError

__all__ = [
    "COLUMNS",
    "TRACE_FORMATS",
    "LoadReport",
    "Trace",
    "TraceError",
    "detect_format",
    "load_trace",
    "read_parquet",
    "write_parquet",
]
