"""kvcast Parquet: exact round trip, metadata, column validation."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcast.data import bundled_trace_path
from kvcast.features.traces import Trace, TraceError, load_trace, write_parquet
from kvcast.features.traces.parquet_io import BLOCK_SIZE_KEY, NAME_KEY, read_parquet
from kvcast.features.traces.table import make_table


def full_trace() -> Trace:
    table = make_table(
        arrival_ms=[0.0, 1.25, 1.25, 3000.5],
        input_tokens=[512, 1, 0, 10_000],
        output_tokens=[1, 2, 3, 4],
        block_hashes=[[0, 1], [], [2**62, -5], [0]],
        request_id=["a", "b", "c", "d"],
        tenant=["t1", "t2", "default", "t1"],
        session=["s1", None, "s2", "s1"],
        chat_id=[1, None, 3, 4],
        parent_chat_id=[-1, None, 1, 3],
    )
    return Trace(requests=table, name="full", block_size=16)


def assert_same(a: Trace, b: Trace) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    assert a.requests["block_hashes"].map(type).eq(list).all()
    assert b.requests["block_hashes"].tolist() == a.requests["block_hashes"].tolist()
    assert (a.name, a.block_size) == (b.name, b.block_size)


def test_roundtrip_is_exact_including_optional_columns_and_nulls(tmp_path: Path) -> None:
    trace = full_trace()
    back = read_parquet(write_parquet(trace, tmp_path / "x.parquet"))
    assert_same(trace, back)
    assert back.requests["session"].isna().tolist() == [False, True, False, False]


def test_roundtrip_is_exact_for_the_bundled_trace(tmp_path: Path) -> None:
    trace = load_trace(bundled_trace_path("conversation"))
    path = tmp_path / "conv.parquet"
    write_parquet(trace, path)
    assert_same(trace, load_trace(path))


def test_block_size_and_name_are_stored_in_schema_metadata(tmp_path: Path) -> None:
    path = write_parquet(full_trace(), tmp_path / "x.parquet")
    meta = pq.read_schema(path).metadata
    assert meta[BLOCK_SIZE_KEY] == b"16" and meta[NAME_KEY] == b"full"
    assert BLOCK_SIZE_KEY == b"kvcast.block_size"


def test_reader_overrides_name_and_block_size_when_asked(tmp_path: Path) -> None:
    back = read_parquet(write_parquet(full_trace(), tmp_path / "x.parquet"), name="n", block_size=8)
    assert (back.name, back.block_size) == ("n", 8)


@pytest.mark.parametrize("column", ["arrival_ms", "input_tokens", "output_tokens", "block_hashes"])
def test_a_missing_column_a_request_needs_raises_naming_it(tmp_path: Path, column: str) -> None:
    path = write_parquet(full_trace(), tmp_path / "x.parquet")
    pq.write_table(pq.read_table(path).drop_columns([column]), path)
    with pytest.raises(TraceError, match=rf"x.parquet: missing column '{column}'"):
        read_parquet(path)


def test_a_file_with_only_the_needed_columns_gets_the_others_as_a_jsonl_trace_would(
    tmp_path: Path,
) -> None:
    path = write_parquet(full_trace(), tmp_path / "x.parquet")
    optional = ["request_id", "tenant", "session", "chat_id", "parent_chat_id"]
    pq.write_table(pq.read_table(path).drop_columns(optional), path)
    back = read_parquet(path).requests
    full = read_parquet(write_parquet(full_trace(), tmp_path / "y.parquet")).requests
    assert back["request_id"].is_unique and (back["tenant"] == "default").all()
    assert back["session"].isna().all() and back["chat_id"].isna().all()
    kept = ["arrival_ms", "input_tokens", "output_tokens"]
    assert back[kept].equals(full[kept])
    assert back["block_hashes"].tolist() == full["block_hashes"].tolist()


def test_mistyped_column_raises_naming_it(tmp_path: Path) -> None:
    path = write_parquet(full_trace(), tmp_path / "x.parquet")
    table = pq.read_table(path)
    index = table.column_names.index("input_tokens")
    table = table.set_column(index, "input_tokens", pa.array(["1", "2", "3", "4"]))
    pq.write_table(table, path)
    with pytest.raises(TraceError, match=r"column 'input_tokens' has type string"):
        read_parquet(path)


def test_null_in_a_required_column_raises(tmp_path: Path) -> None:
    path = write_parquet(full_trace(), tmp_path / "x.parquet")
    table = pq.read_table(path)
    index = table.column_names.index("arrival_ms")
    table = table.set_column(index, "arrival_ms", pa.array([0.0, None, 1.0, 2.0]))
    pq.write_table(table, path)
    with pytest.raises(TraceError, match=r"column 'arrival_ms' has 1 nulls"):
        read_parquet(path)


def test_file_that_is_not_parquet_raises_trace_error(tmp_path: Path) -> None:
    path = tmp_path / "x.parquet"
    path.write_text("hello")
    with pytest.raises(TraceError, match=r"x.parquet: not a readable Parquet file"):
        read_parquet(path)


def test_unsorted_parquet_is_sorted_and_reported(tmp_path: Path) -> None:
    trace = full_trace()
    shuffled = Trace(trace.requests.iloc[::-1].reset_index(drop=True), "full", 16)
    back = read_parquet(write_parquet(shuffled, tmp_path / "x.parquet"))
    assert back.report.reordered
    assert back.requests["request_id"].tolist() == ["a", "c", "b", "d"]


_rows = st.lists(
    st.tuples(
        st.floats(0, 1e9, allow_nan=False),
        st.integers(0, 2**40),
        st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4),
        st.one_of(st.none(), st.text(min_size=1, max_size=5)),
        st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=40, deadline=None)
@given(rows=_rows)
def test_roundtrip_is_exact_for_any_table(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple]
) -> None:
    rows = sorted(rows, key=lambda r: r[0])
    table = make_table(
        arrival_ms=[r[0] for r in rows],
        input_tokens=[r[1] for r in rows],
        output_tokens=[r[1] // 2 for r in rows],
        block_hashes=[r[2] for r in rows],
        request_id=[f"id{i}" for i in range(len(rows))],
        session=[r[3] for r in rows],
        chat_id=[r[4] for r in rows],
    )
    trace = Trace(table, name="prop", block_size=32)
    path = tmp_path_factory.mktemp("prop") / "p.parquet"
    assert_same(trace, read_parquet(write_parquet(trace, path)))


def test_negative_arrivals_are_refused_as_in_mooncake(tmp_path: Path) -> None:
    path = write_parquet(full_trace(), tmp_path / "x.parquet")
    table = pq.read_table(path)
    arrival = pa.array([-1.0, 1.25, 1.25, 3000.5])
    pq.write_table(table.set_column(0, "arrival_ms", arrival), path)
    with pytest.raises(TraceError, match=r"x.parquet: column 'arrival_ms' has negative values"):
        read_parquet(path)


@pytest.mark.parametrize(
    ("key", "value"), [(BLOCK_SIZE_KEY, b"0"), (BLOCK_SIZE_KEY, b"-4"), (NAME_KEY, b"\xff")]
)
def test_bad_metadata_is_a_trace_error_naming_the_file(
    tmp_path: Path, key: bytes, value: bytes
) -> None:
    path = write_parquet(full_trace(), tmp_path / "x.parquet")
    table = pq.read_table(path)
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, key: value}), path)
    with pytest.raises(TraceError, match=rf"x.parquet: bad {key.decode()} "):
        read_parquet(path)


U64_MAX = 2**64 - 1


def test_u64_block_hashes_from_jsonl_roundtrip_exactly_as_uint64(tmp_path: Path) -> None:
    src = tmp_path / "u.jsonl"
    hashes = [[0, 2**63, U64_MAX], [2**63 - 1], []]
    src.write_text(
        "".join(
            f'{{"timestamp": {i}, "input_length": 9, "output_length": 1, "hash_ids": {h}}}\n'
            for i, h in enumerate(hashes)
        )
    )
    trace = load_trace(src)
    assert trace.requests["block_hashes"].tolist() == hashes
    path = write_parquet(trace, tmp_path / "u.parquet")
    assert pq.read_schema(path).field("block_hashes").type == pa.list_(pa.uint64())
    assert_same(trace, read_parquet(path))


def test_hashes_that_fit_int64_are_still_stored_as_int64(tmp_path: Path) -> None:
    path = write_parquet(full_trace(), tmp_path / "x.parquet")
    assert pq.read_schema(path).field("block_hashes").type == pa.list_(pa.int64())


def test_a_table_mixing_negative_and_u64_hashes_is_refused_naming_both(tmp_path: Path) -> None:
    table = make_table(
        arrival_ms=[0.0, 1.0], input_tokens=[1, 1], output_tokens=[1, 1],
        block_hashes=[[-5, 1], [U64_MAX]],
    )  # fmt: skip
    with pytest.raises(ValueError, match=rf"-5 .*{U64_MAX}"):
        write_parquet(Trace(table, "mixed", 16), tmp_path / "m.parquet")
    assert not (tmp_path / "m.parquet").exists()


def test_a_hash_beyond_64_bits_is_refused_naming_it(tmp_path: Path) -> None:
    table = make_table(
        arrival_ms=[0.0], input_tokens=[1], output_tokens=[1], block_hashes=[[1, 2**64]]
    )
    with pytest.raises(ValueError, match=rf"{2**64}"):
        write_parquet(Trace(table, "big", 16), tmp_path / "b.parquet")


def test_dictionary_encoded_string_columns_load_like_plain_strings(tmp_path: Path) -> None:
    trace = full_trace()
    path = write_parquet(trace, tmp_path / "x.parquet")
    table = pq.read_table(path)
    for name in ("request_id", "tenant", "session"):
        i = table.schema.get_field_index(name)
        table = table.set_column(i, name, table.column(name).dictionary_encode())
    pq.write_table(table, path)
    assert pa.types.is_dictionary(pq.read_schema(path).field("session").type)
    assert_same(trace, read_parquet(path))


def test_a_pandas_categorical_trace_loads_like_plain_strings(tmp_path: Path) -> None:
    trace = full_trace()
    df = trace.requests.copy()
    df["tenant"] = df["tenant"].astype("category")
    df["session"] = df["session"].astype("category")
    path = tmp_path / "cat.parquet"
    df.to_parquet(path)
    back = read_parquet(path)
    pd.testing.assert_frame_equal(back.requests, trace.requests, check_exact=True)
    assert back.requests["block_hashes"].tolist() == trace.requests["block_hashes"].tolist()


def test_an_empty_table_is_named_empty_whatever_its_columns_types(tmp_path: Path) -> None:
    """pandas writes the columns of an empty frame typed null: that was reported as a
    mistyped column ("has type null"), not as the empty trace it is."""
    from kvcast.features.traces.table import COLUMNS

    path = tmp_path / "empty.parquet"
    pd.DataFrame({c: [] for c in COLUMNS}).to_parquet(path)
    with pytest.raises(TraceError, match=r"empty\.parquet: contains no requests"):
        load_trace(path)
