"""The feature spec: declared once, versioned, hashed, and compared naming what differs."""

from __future__ import annotations

import dataclasses

import pytest

from kvcast.features.config import FeatureConfig
from kvcast.features.spec import FeatureDef, FeatureSpec, SpecMismatch, build_spec, duration_tag


def test_names_are_unique_and_every_feature_has_a_unit_family_and_doc() -> None:
    spec = build_spec(FeatureConfig())
    assert len(set(spec.names)) == len(spec)
    for f in spec.features:
        assert f.unit and f.doc and f.family in {"session", "heat", "queue", "memory", "meta"}


def test_one_heat_feature_per_half_life_and_one_slope_per_window() -> None:
    spec = build_spec(FeatureConfig(heat_half_lives_ms=(1500.0, 60000.0)))
    assert [n for n in spec.names if n.startswith("heat_")] == ["heat_1500ms", "heat_60s"]
    assert "node_queue_slope_30s" in spec.names and "node_prefill_slope_5s" in spec.names


def test_duration_tag_uses_seconds_when_whole() -> None:
    assert (duration_tag(5000.0), duration_tag(250.0)) == ("5s", "250ms")


def test_diff_names_missing_extra_moved_and_re_united_features() -> None:
    a = build_spec(FeatureConfig())
    feats = list(a.features)
    feats[0], feats[1] = feats[1], feats[0]
    feats[2] = dataclasses.replace(feats[2], unit="s")
    b = FeatureSpec("2", (*feats[:-1], FeatureDef("new_one", "x", "meta", "d")))
    lines = a.diff(b)
    assert "version: 1 != 2" in lines
    assert any(line.startswith(f"{feats[0].name}: position") for line in lines)
    assert any(line.startswith(f"{feats[2].name}: unit") for line in lines)
    assert f"{a.names[-1]}: missing from the other spec" in lines
    assert "new_one: only in the other spec" in lines
    assert a.diff(build_spec(FeatureConfig())) == []


def test_require_equal_raises_naming_the_differing_feature() -> None:
    a = build_spec(FeatureConfig())
    b = build_spec(FeatureConfig(heat_half_lives_ms=(5000.0, 30000.0)))
    with pytest.raises(SpecMismatch, match="heat_300s"):
        a.require_equal(b)


def test_json_round_trip_keeps_the_spec_and_its_digest() -> None:
    a = build_spec(FeatureConfig())
    b = FeatureSpec.from_json(a.to_json())
    assert b == a and b.digest == a.digest


def test_digest_changes_when_the_order_changes() -> None:
    a = build_spec(FeatureConfig())
    b = FeatureSpec(a.version, tuple(reversed(a.features)))
    assert a.digest != b.digest


def test_a_feature_added_or_removed_is_not_reported_as_moving_every_one_after_it() -> None:
    """The sidecar's refusal of a model with other heat half-lives listed 30 features as moved
    ("depth: position 10 != 9", ...) around the two lines that say what differs."""
    a = build_spec(FeatureConfig())
    b = build_spec(FeatureConfig(heat_half_lives_ms=(5000.0, 60000.0)))
    assert a.diff(b) == [
        "heat_30s: missing from the other spec",
        "heat_300s: missing from the other spec",
        "heat_60s: only in the other spec",
    ]
    feats = list(a.features)
    feats.insert(3, feats.pop(10))  # moved among the features both have: still named
    moved = a.diff(FeatureSpec(a.version, tuple(feats)))
    assert f"{a.names[10]}: position 10 != 3" in moved and len(moved) == 8  # it, and 7 passed
