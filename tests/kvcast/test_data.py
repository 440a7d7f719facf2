"""Where a trace named as ``bundled:NAME`` or as a path is (one rule for the CLI and the
notebooks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcast.data import BUNDLED_TRACES, bundled_trace_path, trace_file


@pytest.mark.parametrize("name", sorted(BUNDLED_TRACES))
def test_a_bundled_spec_is_its_samples_file_and_name(name: str) -> None:
    assert trace_file(f"bundled:{name}") == (bundled_trace_path(name), name)


def test_any_other_spec_is_a_path_without_a_name(tmp_path: Path) -> None:
    assert trace_file(tmp_path / "my.jsonl") == (tmp_path / "my.jsonl", None)
    assert trace_file("runs/bundled.jsonl") == (Path("runs/bundled.jsonl"), None)


def test_an_unknown_bundled_name_is_refused_listing_the_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"'nope'.*conversation, synthetic"):
        trace_file("bundled:nope")
