"""Mooncake JSONL loader: canonical columns, validation with FILE:LINE messages, skip_bad."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import pandas as pd
import pytest

from kvcast.features.traces.mooncake import load_mooncake
from kvcast.features.traces.table import COLUMNS, TraceError

DEV_TRACE = Path("/work/shared/traces/mooncake_conversation_dev.jsonl")
GOOD = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}'


def write(tmp_path: Path, *lines: str, name: str = "t.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def rec(**fields: object) -> str:
    base: dict[str, object] = {
        "timestamp": 10,
        "input_length": 1024,
        "output_length": 3,
        "hash_ids": [7, 8],
    }
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not ...})


def test_required_fields_fill_the_canonical_columns(tmp_path: Path) -> None:
    trace = load_mooncake(write(tmp_path, GOOD, rec()))
    df = trace.requests
    assert tuple(df.columns) == COLUMNS
    assert df["arrival_ms"].tolist() == [0.0, 10.0]
    assert df["input_tokens"].tolist() == [600, 1024]
    assert df["output_tokens"].tolist() == [5, 3]
    assert df["block_hashes"].tolist() == [[0, 1], [7, 8]]
    assert df["tenant"].tolist() == ["default", "default"]
    assert df["session"].isna().all() and df["chat_id"].isna().all()
    assert (trace.name, trace.block_size, trace.source) == ("t", 512, str(tmp_path / "t.jsonl"))
    assert trace.report.lines == 2 and not trace.report.reordered


def test_request_ids_are_physical_line_numbers(tmp_path: Path) -> None:
    trace = load_mooncake(write(tmp_path, GOOD, "", "  ", rec()))
    assert trace.requests["request_id"].tolist() == ["r1", "r4"]
    assert trace.report.lines == 2


def test_source_request_id_is_kept(tmp_path: Path) -> None:
    trace = load_mooncake(write(tmp_path, rec(request_id="abc"), rec(request_id=42)))
    assert trace.requests["request_id"].tolist() == ["abc", "42"]


def test_optional_fields_are_kept_when_present_and_unknown_keys_ignored(tmp_path: Path) -> None:
    lines = (
        rec(chat_id=5, parent_chat_id=-1, session_id="s1", tenant="acme", turn=1, type="text"),
        rec(chat_id=6, parent_chat_id=5, session=9),
    )
    df = load_mooncake(write(tmp_path, *lines)).requests
    assert df["chat_id"].tolist() == [5, 6]
    assert df["parent_chat_id"].tolist() == [-1, 5]
    assert df["session"].tolist() == ["s1", "9"]
    assert df["tenant"].tolist() == ["acme", "default"]
    assert str(df["chat_id"].dtype) == "Int64"


def test_hash_ids_count_is_not_checked_against_input_length(tmp_path: Path) -> None:
    trace = load_mooncake(write(tmp_path, rec(input_length=5000, hash_ids=[1]), rec(hash_ids=[])))
    assert trace.requests["block_hashes"].tolist() == [[1], []]


@pytest.mark.parametrize(
    ("line", "needles"),
    [
        ('{"timestamp": 0, "input_length": 1', ["invalid JSON"]),
        ("[1, 2]", ["expected a JSON object", "[1, 2]"]),
        (rec(hash_ids=...), ["missing key 'hash_ids'"]),
        (rec(timestamp=...), ["missing key 'timestamp'"]),
        (rec(timestamp="soon"), ["timestamp", "'soon'"]),
        (rec(input_length=1.5), ["input_length", "1.5"]),
        (rec(output_length=True), ["output_length", "True"]),
        (rec(input_length=-1), ["input_length", "-1"]),
        (rec(output_length=-7), ["output_length", "-7"]),
        (rec(timestamp=float("nan")), ["timestamp", "nan"]),
        (rec(timestamp=float("inf")), ["timestamp", "inf"]),
        (rec(timestamp=-5), ["timestamp", "-5"]),
        (rec(hash_ids="0,1"), ["hash_ids", "'0,1'"]),
        (rec(hash_ids=[1, "x"]), ["hash_ids[1]", "'x'"]),
        (rec(chat_id="c"), ["chat_id", "'c'"]),
        (rec(tenant=3.5), ["tenant", "3.5"]),
    ],
)
def test_malformed_line_error_names_file_line_and_key(
    tmp_path: Path, line: str, needles: list[str]
) -> None:
    path = write(tmp_path, GOOD, line)
    with pytest.raises(TraceError) as info:
        load_mooncake(path)
    message = str(info.value)
    assert message.startswith(f"{path}:2: ")
    for needle in needles:
        assert needle in message


def test_invalid_utf8_line_is_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(GOOD.encode() + b"\n\xff\xfe\n")
    with pytest.raises(TraceError, match=r":2: not UTF-8"):
        load_mooncake(path)


def test_duplicate_request_id_is_a_bad_line(tmp_path: Path) -> None:
    path = write(tmp_path, rec(request_id="a"), rec(request_id="a"))
    with pytest.raises(TraceError, match=r":2: duplicate request_id 'a' \(first on line 1\)"):
        load_mooncake(path)


def test_skip_bad_counts_and_skips_bad_lines(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD, "not json", rec(input_length=-1), rec(), rec(hash_ids=...))
    trace = load_mooncake(path, skip_bad=True)
    assert len(trace) == 2
    assert trace.requests["request_id"].tolist() == ["r1", "r4"]
    report = trace.report
    assert (report.lines, report.skipped_bad) == (5, 3)
    assert [e.split(": ")[0] for e in report.first_errors] == [f"{path}:{n}" for n in (2, 3, 5)]
    assert "3 bad lines skipped" in report.summary()


def test_skip_bad_keeps_only_the_first_five_messages(tmp_path: Path) -> None:
    trace = load_mooncake(write(tmp_path, GOOD, *["{"] * 8), skip_bad=True)
    assert trace.report.skipped_bad == 8
    assert len(trace.report.first_errors) == 5


def test_unsorted_timestamps_are_stable_sorted_and_reported(tmp_path: Path) -> None:
    lines = [rec(timestamp=5), rec(timestamp=1), rec(timestamp=1, input_length=9), rec(timestamp=3)]
    trace = load_mooncake(write(tmp_path, *lines))
    assert trace.report.reordered
    assert trace.requests["request_id"].tolist() == ["r2", "r3", "r4", "r1"]
    assert trace.requests["arrival_ms"].tolist() == [1.0, 1.0, 3.0, 5.0]
    assert "unsorted" in trace.report.summary()


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file_raises_contains_no_requests(tmp_path: Path, content: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(content)
    with pytest.raises(TraceError, match=r"contains no requests$") as info:
        load_mooncake(path)
    assert str(info.value) == f"{path}: contains no requests"


def test_all_lines_bad_with_skip_bad_raises_contains_no_requests(tmp_path: Path) -> None:
    path = write(tmp_path, "{", rec(input_length=-2))
    with pytest.raises(TraceError, match=rf"^{path}: contains no requests \(2 bad lines"):
        load_mooncake(path, skip_bad=True)


def test_gzip_file_loads_the_same_as_plain(tmp_path: Path) -> None:
    plain = write(tmp_path, GOOD, rec(timestamp=3))
    packed = tmp_path / "t.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    trace = load_mooncake(packed)
    pd.testing.assert_frame_equal(trace.requests, load_mooncake(plain).requests)
    assert trace.name == "t"


def test_missing_file_raises_trace_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nope\.jsonl: no such file"):
        load_mooncake(tmp_path / "nope.jsonl")


def test_block_size_and_name_can_be_overridden(tmp_path: Path) -> None:
    trace = load_mooncake(write(tmp_path, GOOD), block_size=16, name="mine")
    assert (trace.block_size, trace.name) == (16, "mine")


@pytest.mark.skipif(not DEV_TRACE.exists(), reason="shared dev trace not present")
def test_dev_trace_loads_all_7851_requests_without_bad_lines() -> None:
    trace = load_mooncake(DEV_TRACE)
    assert len(trace) == 7851 and trace.report.skipped_bad == 0


def test_a_made_up_id_never_takes_an_explicit_one(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [], '
        '"request_id": "r2"}\n'
        '{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": []}\n'
    )
    for skip_bad in (False, True):
        t = load_mooncake(path, skip_bad=skip_bad)
        assert len(t) == 2 and t.requests["request_id"].is_unique


U64_MAX = 2**64 - 1


@pytest.mark.parametrize("hashes", [[U64_MAX, 2**63], [0, 2**63 - 1, 2**63], [-5, 2**62]])
def test_u64_block_hashes_load_with_their_exact_values(tmp_path: Path, hashes: list[int]) -> None:
    trace = load_mooncake(write(tmp_path, GOOD, rec(hash_ids=hashes)))
    assert trace.requests["block_hashes"].tolist() == [[0, 1], hashes]


@pytest.mark.parametrize(
    ("hashes", "needles"),
    [
        ([1, 2**64], ["hash_ids[1]", str(2**64)]),
        ([-(2**63) - 1, 3], ["hash_ids[0]", str(-(2**63) - 1)]),
    ],
)
def test_hash_ids_outside_64_bits_are_refused_naming_the_value(
    tmp_path: Path, hashes: list[int], needles: list[str]
) -> None:
    path = write(tmp_path, GOOD, rec(hash_ids=hashes))
    with pytest.raises(TraceError) as info:
        load_mooncake(path)
    assert str(info.value).startswith(f"{path}:2: ")
    for needle in needles:
        assert needle in str(info.value)


@pytest.mark.parametrize(
    "fields",
    [
        {"session": None, "session_id": "s1"},
        {"session_id": None, "session": "s1"},
        {"session": "s1", "session_id": "s1"},
        {"session": None, "session_id": None, "other": "s1"},
    ],
)
def test_a_null_session_alias_does_not_hide_the_other(
    tmp_path: Path, fields: dict[str, object]
) -> None:
    session = load_mooncake(write(tmp_path, rec(**fields))).requests["session"]
    if "other" in fields:  # null in every alias: unknown
        assert session.isna().all()
    else:
        assert session.tolist() == ["s1"]


def test_two_different_session_aliases_are_an_error_naming_both(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD, rec(session="a", session_id="b"))
    with pytest.raises(TraceError) as info:
        load_mooncake(path)
    message = str(info.value)
    assert message.startswith(f"{path}:2: ")
    assert "session 'a'" in message and "session_id 'b'" in message


def truncated_gzip(tmp_path: Path, lines: list[str], keep: float, name: str) -> tuple[Path, int]:
    """``lines`` gzipped and cut to ``keep`` of the compressed bytes (negative: drop that many
    bytes from the end); also how many complete lines the cut stream still holds."""
    packed = gzip.compress("".join(f"{line}\n" for line in lines).encode())
    cut = packed[: int(len(packed) * keep) if keep > 0 else len(packed) + int(keep)]
    path = tmp_path / name
    path.write_bytes(cut)
    complete = zlib.decompressobj(wbits=31).decompress(cut).count(b"\n")
    return path, complete


MANY = [rec(timestamp=i, hash_ids=[i, i + 1]) for i in range(3000)]


@pytest.mark.parametrize("keep", [0.5, -4])
def test_a_truncated_gzip_trace_is_refused_naming_the_last_complete_line(
    tmp_path: Path, keep: float
) -> None:
    path, complete = truncated_gzip(tmp_path, MANY, keep, "t.jsonl.gz")
    assert 0 < complete <= len(MANY)
    with pytest.raises(TraceError) as info:
        load_mooncake(path)
    message = str(info.value)
    assert message.startswith(f"{path}: truncated after line {complete}")
    assert "\n" not in message


def test_a_gzip_trace_cut_in_its_header_says_no_line_was_read(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(f"{line}\n".encode() for line in MANY))[:12])
    with pytest.raises(TraceError, match=rf"^{path}: truncated before its first line"):
        load_mooncake(path)


def test_a_corrupt_gzip_stream_is_a_trace_error_not_a_traceback(tmp_path: Path) -> None:
    packed = bytearray(gzip.compress("".join(f"{line}\n" for line in MANY).encode()))
    packed[30:50] = bytes(20)
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(bytes(packed))
    with pytest.raises(TraceError, match=rf"^{path}: corrupt compressed stream before its first"):
        load_mooncake(path)


def test_skip_bad_keeps_the_lines_before_a_truncation_and_counts_it(tmp_path: Path) -> None:
    path, complete = truncated_gzip(tmp_path, MANY, 0.5, "t.jsonl.gz")
    trace = load_mooncake(path, skip_bad=True)
    assert len(trace) == complete
    report = trace.report
    assert (report.lines, report.skipped_bad, report.truncated_after) == (complete, 1, complete)
    assert report.first_errors[-1].startswith(f"{path}:{complete + 1}: truncated")
    assert f"truncated after line {complete}" in report.summary()


def test_hash_ids_that_are_not_input_length_in_whole_blocks_are_counted_with_the_first_line(
    tmp_path: Path,
) -> None:
    """Kept as written (the simulator computes with input_length and stores hash_ids), but
    said: a request of 2,048,000 tokens and 11 blocks would otherwise be served as if its
    prompt fitted the cache."""
    lines = [rec(), rec(input_length=1025), rec(input_length=2_048_000), rec(input_length=513)]
    report = load_mooncake(write(tmp_path, *lines)).report
    assert report.uncovered == 2  # 1,025 tokens take 3 blocks, 2,048,000 take 4,000: not 2
    assert "2 requests whose hash_ids are not input_length in whole blocks (first: line 2: " \
           "input_length 1,025, 2 hash_ids of 512 tokens" in report.summary()  # fmt: skip
    assert report.noteworthy
    clean = load_mooncake(write(tmp_path, rec(), rec(input_length=513), name="ok.jsonl")).report
    assert clean.uncovered == 0 and not clean.noteworthy
