"""The trace samples shipped in kvcast/data/traces and their attribution."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kvcast.data import BUNDLED_TRACES, bundled_trace_path
from kvcast.features.traces import load_trace

SHARED = Path("/work/shared/traces")


@pytest.mark.parametrize(("name", "requests"), [("conversation", 1750), ("synthetic", 1000)])
def test_bundled_trace_loads_with_the_expected_request_count(name: str, requests: int) -> None:
    trace = load_trace(bundled_trace_path(name))
    assert len(trace) == requests
    assert trace.report.skipped_bad == 0 and not trace.report.reordered
    assert trace.block_size == 512 and trace.has_blocks


def test_conversation_sample_is_the_first_ten_minutes() -> None:
    arrivals = load_trace(bundled_trace_path("conversation")).requests["arrival_ms"]
    assert arrivals.max() < 600_000


def test_default_bundled_trace_is_the_conversation_sample() -> None:
    assert bundled_trace_path() == bundled_trace_path("conversation")
    assert set(BUNDLED_TRACES) == {"conversation", "synthetic"}


def test_unknown_bundled_trace_name_raises_listing_valid_names() -> None:
    with pytest.raises(ValueError, match="valid names: conversation, synthetic"):
        bundled_trace_path("chat")


@pytest.mark.parametrize("name", ["conversation", "synthetic"])
def test_hash_ids_cover_every_512_token_block_of_the_prompt(name: str) -> None:
    df = load_trace(bundled_trace_path(name)).requests
    expected = [math.ceil(n / 512) for n in df["input_tokens"]]
    assert df["block_hashes"].map(len).tolist() == expected


@pytest.mark.skipif(not SHARED.exists(), reason="shared traces not present")
@pytest.mark.parametrize(
    ("name", "source", "lines"),
    [
        ("conversation", "mooncake_conversation_dev.jsonl", 1750),
        ("synthetic", "mooncake_synthetic.jsonl", 1000),
    ],
)
def test_bundled_sample_is_a_byte_exact_prefix_of_its_source(
    name: str, source: str, lines: int
) -> None:
    ours = bundled_trace_path(name).read_bytes().splitlines(keepends=True)
    theirs = (SHARED / source).read_bytes().splitlines(keepends=True)
    assert len(ours) == lines and ours == theirs[:lines]


def test_notice_attributes_the_mooncake_release_under_apache_2() -> None:
    notice = (bundled_trace_path().parent / "NOTICE.md").read_text()
    for needle in ("kvcache-ai/Mooncake", "FAST25-release/traces/", "Apache License, Version 2.0"):
        assert needle in notice
