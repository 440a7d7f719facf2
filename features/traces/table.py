"""The canonical request table every loader produces and every consumer reads.

One row per request, sorted by arrival:

=================  ==========  ============================================================
column             dtype       meaning
=================  ==========  ============================================================
``arrival_ms``     float64     arrival time, ms since trace start
``request_id``     string      unique id (the loader makes one when the source has none)
``tenant``         string      tenant; ``"default"`` when the source has none
``session``        string      session / conversation id, ``<NA>`` when unknown
``input_tokens``   int64       prompt tokens
``output_tokens``  int64       generated tokens
``block_hashes``   object      list[int] of 64-bit prefix block hashes: u64 (vLLM's) or
                               negative int64 (empty: cache-less source)
``chat_id``        Int64       Alibaba-style chat id when present, else ``<NA>``
``parent_chat_id`` Int64       parent chat id when present, else ``<NA>``
=================  ==========  ============================================================

``block_size`` (tokens per block) is a property of the whole trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

COLUMNS: tuple[str, ...] = (
    "arrival_ms",
    "request_id",
    "tenant",
    "session",
    "input_tokens",
    "output_tokens",
    "block_hashes",
    "chat_id",
    "parent_chat_id",
)

DEFAULT_TENANT = "default"


class TraceError(ValueError):
    """A trace cannot be read; the message names the file, the line when known, and why."""


@dataclass(frozen=True)
class LoadReport:
    """What a loader noticed and did while reading: counts, never silent changes."""

    lines: int = 0
    skipped_bad: int = 0
    reordered: bool = False
    first_errors: tuple[str, ...] = ()
    truncated_after: int | None = None  # skip_bad: the compressed stream broke off after it
    # requests whose block hashes do not cover their input tokens in whole blocks (the
    # simulator computes with the tokens and stores the blocks), and the first one
    uncovered: int = 0
    first_uncovered: str = ""

    def summary(self) -> str:
        parts = [f"{self.lines} lines"]
        if self.skipped_bad:
            n = self.skipped_bad
            parts.append(f"{n} bad line{'s' if n != 1 else ''} skipped")
        if self.truncated_after is not None:
            parts.append(f"file truncated after line {self.truncated_after} (the rest is lost)")
        if self.reordered:
            parts.append("timestamps were unsorted and have been sorted")
        if self.uncovered:
            n = self.uncovered
            parts.append(
                f"{n} request{'s' if n != 1 else ''} whose hash_ids are not input_length in "
                f"whole blocks (first: {self.first_uncovered}; the simulator computes with "
                "input_length and stores hash_ids)"
            )
        return ", ".join(parts)

    @property
    def noteworthy(self) -> bool:
        """Whether the loader changed or doubts something the user should hear of."""
        return bool(self.skipped_bad or self.reordered or self.uncovered)


@dataclass(frozen=True, eq=False)
class Trace:
    """A validated request trace in canonical form.

    Equality is identity (a DataFrame has no single truth value); compare ``requests`` with
    ``pandas.testing.assert_frame_equal``.
    """

    requests: pd.DataFrame
    name: str
    block_size: int
    source: str | None = None
    report: LoadReport = field(default_factory=LoadReport)

    def __post_init__(self) -> None:
        bs = self.block_size
        if isinstance(bs, bool) or not isinstance(bs, int | np.integer) or bs <= 0:
            raise ValueError(f"block_size must be a positive integer, got {bs!r}")

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def duration_ms(self) -> float:
        if self.requests.empty:
            return 0.0
        a = self.requests["arrival_ms"].to_numpy()
        return float(a[-1] - a[0])

    @property
    def has_blocks(self) -> bool:
        return bool(self.requests["block_hashes"].map(len).sum() > 0)

    def window(self, start_ms: float | None = None, end_ms: float | None = None) -> Trace:
        """Requests with ``start_ms <= arrival < end_ms``, arrivals rebased to ``start_ms``.

        ``None`` leaves that side open; an open start keeps the arrivals as they are.
        """
        for bound in (start_ms, end_ms):
            if bound is not None and np.isnan(bound):
                raise ValueError("window bounds must be numbers, got nan")
        if start_ms is not None and end_ms is not None and end_ms < start_ms:
            raise ValueError(f"window end {end_ms} is before its start {start_ms}")
        df = self.requests
        arrival = df["arrival_ms"].to_numpy()
        mask = np.ones(len(df), dtype=bool)
        if start_ms is not None:
            mask &= arrival >= start_ms
        if end_ms is not None:
            mask &= arrival < end_ms
        out = df.loc[mask].reset_index(drop=True)
        if start_ms:
            out["arrival_ms"] = out["arrival_ms"] - float(start_ms)
        return replace(self, requests=out)

    def time_scaled(self, factor: float) -> Trace:
        """Compress arrivals by ``factor`` (2.0 = the same traffic at twice the rate)."""
        if not np.isfinite(factor) or factor <= 0:
            raise ValueError(f"time-scale must be a positive finite number, got {factor!r}")
        out = self.requests.copy()
        out["arrival_ms"] = out["arrival_ms"] / factor
        return replace(self, requests=out)


def sort_by_arrival(df: pd.DataFrame) -> tuple[pd.DataFrame, bool]:
    """Stable-sort a table by arrival; also say whether it was out of order."""
    arrival = df["arrival_ms"].to_numpy()
    if len(arrival) < 2 or bool(np.all(arrival[1:] >= arrival[:-1])):
        return df, False
    order = np.argsort(arrival, kind="stable")
    return df.iloc[order].reset_index(drop=True), True


def empty_table() -> pd.DataFrame:
    return make_table(
        arrival_ms=np.zeros(0),
        input_tokens=np.zeros(0, np.int64),
        output_tokens=np.zeros(0, np.int64),
        block_hashes=[],
    )


def make_table(
    *,
    arrival_ms: np.ndarray | list[float],
    input_tokens: np.ndarray | list[int],
    output_tokens: np.ndarray | list[int],
    block_hashes: list[list[int]],
    request_id: list[str] | None = None,
    tenant: list[str] | None = None,
    session: list[str | None] | None = None,
    chat_id: list[int | None] | None = None,
    parent_chat_id: list[int | None] | None = None,
) -> pd.DataFrame:
    """Build a canonical table (unsorted input is kept in order; loaders sort)."""
    n = len(arrival_ms)
    df = pd.DataFrame(
        {
            "arrival_ms": np.asarray(arrival_ms, dtype=np.float64),
            "request_id": pd.array(
                request_id if request_id is not None else [str(i) for i in range(n)],
                dtype="string",
            ),
            "tenant": pd.array(
                tenant if tenant is not None else [DEFAULT_TENANT] * n, dtype="string"
            ),
            "session": pd.array(session if session is not None else [None] * n, dtype="string"),
            "input_tokens": np.asarray(input_tokens, dtype=np.int64),
            "output_tokens": np.asarray(output_tokens, dtype=np.int64),
            "block_hashes": pd.Series(list(block_hashes), dtype=object),
            "chat_id": pd.array(chat_id if chat_id is not None else [None] * n, dtype="Int64"),
            "parent_chat_id": pd.array(
                parent_chat_id if parent_chat_id is not None else [None] * n, dtype="Int64"
            ),
        }
    )
    return df[list(COLUMNS)]
