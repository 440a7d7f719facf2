"""Azure LLM inference CSV loader: date-times to ms, cache-less rows, FILE:LINE errors."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import pytest

from kvcast.features.traces.azure import load_azure, parse_timestamp_ns
from kvcast.features.traces.table import COLUMNS, TraceError

HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"


def write(tmp_path: Path, *rows: str, header: str = HEADER) -> Path:
    path = tmp_path / "azure.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def test_timestamps_become_ms_since_the_first_row(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "2023-11-16 18:15:46.6805900,4808,10",
        "2023-11-16 18:15:47.0000001,100,2",
        "2023-11-16 18:16:46.6805900,3180,8",
    )
    df = load_azure(path).requests
    assert df["arrival_ms"].tolist() == pytest.approx([0.0, 319.4101, 60000.0], abs=1e-9)
    assert df["input_tokens"].tolist() == [4808, 100, 3180]
    assert df["output_tokens"].tolist() == [10, 2, 8]


def test_rows_are_cache_less_with_empty_block_lists(tmp_path: Path) -> None:
    trace = load_azure(write(tmp_path, "2023-11-16 18:15:46.6805900,4808,10"))
    assert tuple(trace.requests.columns) == COLUMNS
    assert trace.requests["block_hashes"].tolist() == [[]]
    assert not trace.has_blocks
    assert trace.requests["tenant"].tolist() == ["default"]


def test_request_ids_name_the_csv_line(tmp_path: Path) -> None:
    trace = load_azure(write(tmp_path, "2023-11-16 18:15:46,1,1", "", "2023-11-16 18:15:47,2,2"))
    assert trace.requests["request_id"].tolist() == ["r2", "r4"]


def test_parse_timestamp_keeps_all_fraction_digits_and_converts_offsets_to_utc() -> None:
    base = parse_timestamp_ns("2023-11-16 18:15:46")
    assert parse_timestamp_ns("2023-11-16 18:15:46.6805900") - base == 680_590_000
    assert parse_timestamp_ns("2023-11-16T18:15:46.000000001") - base == 1
    assert parse_timestamp_ns("2023-11-16 20:15:46+02:00") == base
    assert parse_timestamp_ns("2023-11-16 18:15:46.5Z") - base == 500_000_000


@pytest.mark.parametrize(
    ("row", "needles"),
    [
        ("yesterday,10,1", ["TIMESTAMP", "'yesterday'"]),
        ("2023-11-16 18:15:47,-3,1", ["ContextTokens", "'-3'"]),
        ("2023-11-16 18:15:47,12.5,1", ["ContextTokens", "'12.5'"]),
        ("2023-11-16 18:15:47,12,x", ["GeneratedTokens", "'x'"]),
        ("2023-11-16 18:15:47,12", ["expected 3 fields, got 2"]),
        ("2023-11-16 18:15:47,99999999999999999999,1", ["ContextTokens", "int64"]),
    ],
)
def test_malformed_row_error_names_file_line_and_column(
    tmp_path: Path, row: str, needles: list[str]
) -> None:
    path = write(tmp_path, "2023-11-16 18:15:46,1,1", row)
    with pytest.raises(TraceError) as info:
        load_azure(path)
    assert str(info.value).startswith(f"{path}:3: ")
    for needle in needles:
        assert needle in str(info.value)


def test_skip_bad_counts_and_skips_bad_rows(tmp_path: Path) -> None:
    path = write(tmp_path, "2023-11-16 18:15:46,1,1", "bad,1,1", "2023-11-16 18:15:48,2,-2")
    trace = load_azure(path, skip_bad=True)
    assert len(trace) == 1
    assert (trace.report.lines, trace.report.skipped_bad) == (3, 2)
    assert trace.report.first_errors[0].startswith(f"{path}:3: ")


def test_missing_column_raises_naming_it(tmp_path: Path) -> None:
    path = write(tmp_path, "2023-11-16 18:15:46,1", header="TIMESTAMP,ContextTokens")
    with pytest.raises(TraceError, match=r":1: missing column 'GeneratedTokens'"):
        load_azure(path)


def test_extra_columns_and_header_spaces_are_accepted(tmp_path: Path) -> None:
    header = "TIMESTAMP, ContextTokens, GeneratedTokens, Model"
    trace = load_azure(write(tmp_path, "2023-11-16 18:15:46, 5, 6, gpt", header=header))
    assert trace.requests[["input_tokens", "output_tokens"]].values.tolist() == [[5, 6]]


def test_unsorted_rows_are_sorted_and_reported(tmp_path: Path) -> None:
    path = write(tmp_path, "2023-11-16 18:15:50,1,1", "2023-11-16 18:15:46,2,2")
    trace = load_azure(path)
    assert trace.report.reordered
    assert trace.requests["request_id"].tolist() == ["r3", "r2"]
    assert trace.requests["arrival_ms"].tolist() == [0.0, 4000.0]


@pytest.mark.parametrize("content", ["", HEADER + "\n"])
def test_empty_csv_raises_contains_no_requests(tmp_path: Path, content: str) -> None:
    path = tmp_path / "empty.csv"
    path.write_text(content)
    with pytest.raises(TraceError, match=r"empty.csv: contains no requests$"):
        load_azure(path)


def test_gzip_csv_loads(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv.gz"
    path.write_bytes(gzip.compress(f"{HEADER}\n2023-11-16 18:15:46,1,2\n".encode()))
    trace = load_azure(path)
    assert len(trace) == 1 and trace.name == "azure"


def test_undecodable_row_is_a_bad_line_with_its_number(tmp_path: Path) -> None:
    path = tmp_path / "azure.csv"
    path.write_bytes(f"{HEADER}\n2023-11-16 18:15:46,1,1\n".encode() + b"\xff\xfe,1,1\n")
    with pytest.raises(TraceError, match=r"azure\.csv:3: not UTF-8 text"):
        load_azure(path)


def test_a_row_with_more_fields_than_the_header_is_refused(tmp_path: Path) -> None:
    # "1,000" with a thousands separator would otherwise read as 1 context, 0 generated
    path = write(tmp_path, "2023-11-16 18:15:46,1,000,10", "2023-11-16 18:15:47,5,6")
    with pytest.raises(TraceError, match=r"azure.csv:2: expected 3 fields, got 4$"):
        load_azure(path)
    trace = load_azure(path, skip_bad=True)
    assert trace.report.skipped_bad == 1 and trace.requests["input_tokens"].tolist() == [5]


def test_a_timestamp_outside_int64_ns_is_a_line_error(tmp_path: Path) -> None:
    path = write(tmp_path, "2023-11-16 18:15:46,1,1", "9999-12-31 23:59:59.5,2,2")
    with pytest.raises(TraceError, match=r"azure.csv:3: TIMESTAMP must be within 1677-09-21 and"):
        load_azure(path)


def test_timestamps_spanning_more_than_int64_ns_are_refused_not_wrapped(tmp_path: Path) -> None:
    path = write(tmp_path, "1700-01-01 00:00:00,1,1", "2200-01-01 00:00:00,2,2")
    with pytest.raises(TraceError, match=r"azure.csv: timestamps span more than 292 years"):
        load_azure(path)


def truncated_csv_gz(tmp_path: Path, rows: int, keep: float) -> tuple[Path, int]:
    lines = [HEADER] + [f"2023-11-16 18:15:46.{i:07d},{i},1" for i in range(rows)]
    packed = gzip.compress(("\n".join(lines) + "\n").encode())
    cut = packed[: int(len(packed) * keep)]
    path = tmp_path / "azure.csv.gz"
    path.write_bytes(cut)
    return path, zlib.decompressobj(wbits=31).decompress(cut).count(b"\n")


def test_a_truncated_gzip_csv_is_refused_naming_the_last_complete_line(tmp_path: Path) -> None:
    path, complete = truncated_csv_gz(tmp_path, 3000, 0.5)
    with pytest.raises(TraceError, match=rf"^{path}: truncated after line {complete}"):
        load_azure(path)


def test_skip_bad_keeps_the_rows_before_a_truncation_and_counts_it(tmp_path: Path) -> None:
    path, complete = truncated_csv_gz(tmp_path, 3000, 0.5)
    trace = load_azure(path, skip_bad=True)
    assert len(trace) == complete - 1  # the header is line 1
    report = trace.report
    assert (report.skipped_bad, report.truncated_after) == (1, complete)
    assert f"truncated after line {complete}" in report.summary()
