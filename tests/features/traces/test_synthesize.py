"""The synthesised trace replays the source's statistics with fresh block ids."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvcast.data import bundled_trace_path
from kvcast.features.traces import load_trace
from kvcast.features.traces.sessions import session_ids
from kvcast.features.traces.synthesize import global_blocks, synthesize

SCALE = 3


@pytest.fixture(scope="module")
def source() -> pd.DataFrame:
    return load_trace(bundled_trace_path("conversation")).requests


@pytest.fixture(scope="module")
def synth(source: pd.DataFrame) -> pd.DataFrame:
    return synthesize(source, SCALE, seed=1)


def reuse_share(hashes: pd.Series) -> float:
    refs = [h for hs in hashes for h in hs]
    return 1.0 - len(set(refs)) / len(refs)


def test_synthesised_trace_is_scale_times_as_long_at_the_source_rate(
    source: pd.DataFrame, synth: pd.DataFrame
) -> None:
    assert len(synth) == SCALE * len(source)
    span = source["arrival_ms"].max() - source["arrival_ms"].min()
    got = synth["arrival_ms"].max() - synth["arrival_ms"].min()
    assert SCALE * span * 0.95 <= got <= SCALE * span * 1.1
    assert synth["arrival_ms"].is_monotonic_increasing
    gaps = np.diff(synth["arrival_ms"].unique())  # the source's ~3 s quantisation stays
    assert np.abs(gaps - 3000.0 * np.round(gaps / 3000.0)).max() <= 5.0


def test_every_copy_has_the_source_sessions_and_prefix_sharing(
    source: pd.DataFrame, synth: pd.DataFrame
) -> None:
    sizes = Counter(Counter(session_ids(source)).values())
    copies = synth["session"].str.split("-").str[0]
    for c in range(SCALE):
        part = synth[copies == f"c{c}"]
        assert Counter(Counter(part["session"]).values()) == sizes
        assert reuse_share(part["block_hashes"]) == pytest.approx(
            reuse_share(source["block_hashes"]), abs=1e-3
        )
    lens = Counter(len(h) for h in source["block_hashes"])
    assert Counter(len(h) for h in synth["block_hashes"]) == Counter(
        {k: SCALE * v for k, v in lens.items()}
    )


def test_block_ids_are_fresh_except_the_global_ones(
    source: pd.DataFrame, synth: pd.DataFrame
) -> None:
    shared = global_blocks(list(source["block_hashes"]))
    assert shared == {0}  # the system prompt every conversation request starts with
    old = {h for hs in source["block_hashes"] for h in hs}
    copies = synth["session"].str.split("-").str[0]
    per_copy = [
        {h for hs in synth.loc[copies == f"c{c}", "block_hashes"] for h in hs} - shared
        for c in range(SCALE)
    ]
    assert all(not (ids & old) for ids in per_copy)
    assert all(not (a & b) for i, a in enumerate(per_copy) for b in per_copy[i + 1 :])


def test_synthesize_refuses_a_bad_scale_and_an_empty_source(source: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match="scale must be a positive integer, got 0"):
        synthesize(source, 0)
    with pytest.raises(ValueError, match="no requests"):
        synthesize(source.iloc[:0], 2)


def _hash_table(hashes: list[list[int]]) -> pd.DataFrame:
    from kvcast.features.traces.table import make_table

    n = len(hashes)
    return make_table(arrival_ms=[1000.0 * i for i in range(n)],
                      input_tokens=[512 * max(len(h), 1) for h in hashes], output_tokens=[1] * n,
                      block_hashes=hashes)  # fmt: skip


def test_copies_get_fresh_ids_whatever_the_source_id_range(tmp_path: Path) -> None:
    from kvcast.features.traces.synthesize import write_mooncake

    negative = [[-100, -1 - i, -7 - i] for i in range(6)]  # -100: the global prompt
    big = 2**62
    for src in (negative, [[big, big + 1], [big, big + 1, big + 2], [5, 6], [5, 6, 7]]):
        shared = global_blocks(src)
        out = synthesize(_hash_table(src), 2)
        source = {h for hs in src for h in hs}
        copies: dict[str, set[int]] = {}
        for sess, hs in zip(out["session"], out["block_hashes"], strict=True):
            copies.setdefault(sess.split("-")[0], set()).update(h for h in hs if h not in shared)
        assert not copies["c0"] & source and not copies["c0"] & copies["c1"]
        assert len(load_trace(write_mooncake(out, tmp_path / "s.jsonl"))) == len(out)


def test_copies_of_a_u64_trace_get_fresh_u64_ids_that_alias_no_source_id(tmp_path: Path) -> None:
    from kvcast.features.traces import Trace, write_parquet
    from kvcast.features.traces.table import make_table

    top = 2**64 - 1  # a u64 hash; downstream, -1 would name this same block
    src = [[top, 1, 2], [top, 1, 3], [top, 4], [top, 4, 5]]
    shared = global_blocks(src)
    out = synthesize(_hash_table(src), 2)
    fresh = {h for hs in out["block_hashes"] for h in hs if h not in shared}
    source = {h for hs in src for h in hs}
    assert all(0 <= h <= top for h in fresh)
    assert not {h % 2**64 for h in fresh} & {h % 2**64 for h in source}
    table = make_table(
        arrival_ms=out["arrival_ms"],
        input_tokens=out["input_tokens"],
        output_tokens=out["output_tokens"],
        block_hashes=list(out["block_hashes"]),
    )
    write_parquet(Trace(table, "s", 512), tmp_path / "s.parquet")
