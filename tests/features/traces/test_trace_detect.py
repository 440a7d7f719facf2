"""Format detection and the load_trace entry point."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from kvcast.features.traces import (
    TRACE_FORMATS,
    Trace,
    TraceError,
    detect_format,
    load_trace,
    write_parquet,
)
from kvcast.features.traces.table import make_table

JSONL = '{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [0]}\n'
CSV = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,4808,10\n"


def parquet_bytes(tmp_path: Path) -> bytes:
    table = make_table(arrival_ms=[0.0], input_tokens=[1], output_tokens=[1], block_hashes=[[]])
    return write_parquet(Trace(table, "p", 512), tmp_path / "src.parquet").read_bytes()


def test_trace_formats_are_mooncake_azure_parquet() -> None:
    assert TRACE_FORMATS == ("mooncake", "azure", "parquet")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("a.jsonl", "mooncake"),
        ("a.json", "mooncake"),
        ("a.JSONL", "mooncake"),
        ("a.jsonl.gz", "mooncake"),
        ("a.csv", "azure"),
        ("a.parquet", "parquet"),
    ],
)
def test_format_is_detected_by_extension(tmp_path: Path, name: str, expected: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"")
    assert detect_format(path) == expected


def test_format_is_sniffed_from_content_without_a_known_extension(tmp_path: Path) -> None:
    cases = {
        "m.txt": JSONL.encode(),
        "a.log": CSV.encode(),
        "p.bin": parquet_bytes(tmp_path),
        "g.data": gzip.compress(JSONL.encode()),
    }
    found = {}
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        found[name] = detect_format(tmp_path / name)
    expected = {"m.txt": "mooncake", "a.log": "azure", "p.bin": "parquet", "g.data": "mooncake"}
    assert found == expected


def test_unknown_content_raises_naming_path_and_valid_formats(tmp_path: Path) -> None:
    path = tmp_path / "mystery.txt"
    path.write_text("hello world\n")
    with pytest.raises(TraceError, match=r"mystery.txt: .*valid formats: auto, mooncake"):
        detect_format(path)


def test_missing_file_raises_naming_the_path_and_the_bundled_samples(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nothere.jsonl: no such trace file \(or bundled:NAME"):
        load_trace(tmp_path / "nothere.jsonl")


def test_unknown_format_name_raises_listing_valid_formats(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text(JSONL)
    with pytest.raises(TraceError, match=r"a.jsonl: unknown trace format 'vllm'.*azure, parquet"):
        load_trace(path, format="vllm")


def test_load_trace_dispatches_each_format(tmp_path: Path) -> None:
    (tmp_path / "m.jsonl").write_text(JSONL)
    (tmp_path / "a.txt").write_text(CSV)
    (tmp_path / "p.parquet").write_bytes(parquet_bytes(tmp_path))
    assert load_trace(tmp_path / "m.jsonl").has_blocks
    azure = load_trace(tmp_path / "a.txt", format="azure")
    assert not azure.has_blocks and azure.name == "a.txt"
    assert load_trace(tmp_path / "p.parquet").name == "p"


def test_load_trace_passes_skip_bad_name_and_block_size(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text(JSONL + "{oops\n")
    trace = load_trace(path, skip_bad=True, name="n", block_size=16)
    assert (len(trace), trace.report.skipped_bad, trace.name, trace.block_size) == (1, 1, "n", 16)
    with pytest.raises(TraceError, match=r"m.jsonl:2: invalid JSON"):
        load_trace(path)


def test_directory_is_not_a_trace_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r": a directory, not a trace file"):
        load_trace(tmp_path)


def test_an_azure_csv_with_a_quoted_header_is_detected_by_content(tmp_path: Path) -> None:
    path = tmp_path / "azure_trace.txt"
    header = '"TIMESTAMP","ContextTokens","GeneratedTokens"\n'
    path.write_text(header + "2023-11-16 18:15:46.6805900,10,2\n")
    assert detect_format(path) == "azure"


def test_sniffing_a_corrupt_gzip_file_is_a_trace_error_naming_it(tmp_path: Path) -> None:
    lines = "".join(JSONL.replace("[0]", f"[{i}]") for i in range(2000))
    packed = bytearray(gzip.compress(lines.encode()))
    packed[20:40] = bytes(20)  # zlib.error: invalid bit length repeat
    path = tmp_path / "corrupt.data"
    path.write_bytes(bytes(packed))
    with pytest.raises(TraceError, match=rf"^{path}: cannot read \(Error -3 while decompressing"):
        load_trace(path)
