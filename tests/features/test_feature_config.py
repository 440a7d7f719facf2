"""The feature config: YAML in configs/features/ is the built-in default, frozen and checked."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kvcast.config import ConfigError, parse_config
from kvcast.features.config import FeatureConfig, load_feature_config

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parents[2] / "configs/features/default.yaml"

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "features"


def test_default_yaml_equals_the_built_in_defaults() -> None:
    assert load_feature_config(DEFAULT_CONFIG_PATH) == FeatureConfig() == load_feature_config()


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_every_feature_yaml_loads(path: Path) -> None:
    assert isinstance(load_feature_config(path), FeatureConfig)


def test_every_top_level_key_of_the_default_yaml_is_documented_by_a_comment() -> None:
    for line in DEFAULT_CONFIG_PATH.read_text().splitlines():
        if line and not line.startswith((" ", "#")):
            key = line.split(":")[0]
            nested = isinstance(yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())[key], dict)
            assert "#" in line or nested, f"key {key!r} has no comment"


def test_config_is_frozen() -> None:
    with pytest.raises(Exception, match="frozen"):
        FeatureConfig().nodes = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"ticks": {"lookback_ms": 2e6}}, "lookback_ms"),
        ({"distinct_window_ms": 2e6}, "distinct_window_ms"),
        ({"heat_half_lives_ms": [5000.0, 5000.0]}, "heat_half_lives_ms"),
        ({"model": "gpt-9"}, "gpt-9"),
        ({"labels": {"k": 0}}, "labels.k"),
        ({"labels": {"extra_k": [0]}}, "labels.extra_k"),  # label_burst_k0: always 1
        ({"labels": {"extra_k": [2, 2]}}, "labels.extra_k"),  # one column, given twice
        ({"bogus": 1}, "unknown key"),
    ],
)
def test_invalid_values_are_rejected_naming_the_key(data: dict, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_config(FeatureConfig, data, source="test.yaml")


def test_digest_changes_with_any_value() -> None:
    assert FeatureConfig().digest() == FeatureConfig().digest()
    assert FeatureConfig().digest() != FeatureConfig(labels={"k": 2}).digest()
