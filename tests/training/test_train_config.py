"""The train config: the ONNX parity tolerance (a default per kind, shown in every
configs/train file, out-of-range values refused naming the key and the value), and the
replay settings that a features table would make a run ignore (refused, naming them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcast.cli.app import app
from kvcast.cli.train import train_config
from kvcast.config import ConfigError, load_config, parse_config
from kvcast.training.config import (
    CALIBRATION,
    PARITY_TOLERANCE,
    REPLAY_KEYS,
    DataConfig,
    TrainConfig,
)

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "train"


def test_each_kind_has_its_own_default_parity_tolerance() -> None:
    """Exact for the float32 kinds, float32-vs-float64 sums for lgbm, convolution order for
    tcn (the reasons and measurements are beside PARITY_TOLERANCE)."""
    assert PARITY_TOLERANCE == {"recency": 1e-6, "rule": 1e-5, "lgbm": 1e-5, "tcn": 1e-3}
    for kind, tolerance in PARITY_TOLERANCE.items():
        assert parse_config(TrainConfig, {"model": {"kind": kind}}).parity_tolerance == tolerance
        assert train_config(None, None, None, None, False, kind).parity_tolerance == tolerance
    assert TrainConfig().parity_tolerance == PARITY_TOLERANCE["lgbm"]  # the default kind


def test_a_configured_parity_tolerance_overrides_the_kinds_default(tmp_path: Path) -> None:
    path = tmp_path / "train.yaml"
    path.write_text("model:\n  kind: tcn\nexport:\n  parity_tolerance: 2e-4\n")
    assert load_config(TrainConfig, path).parity_tolerance == 2e-4
    zero = {"model": {"kind": "rule"}, "export": {"parity_tolerance": 0}}
    assert parse_config(TrainConfig, zero).parity_tolerance == 0.0  # exact equality


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_train_config_file_shows_its_kinds_default_tolerance(path: Path) -> None:
    cfg = load_config(TrainConfig, path)
    assert cfg.export.parity_tolerance == PARITY_TOLERANCE[cfg.kind]


def test_lgbm_is_calibrated_by_platt_and_the_other_kinds_by_isotonic_unless_configured(
    tmp_path: Path,
) -> None:
    """LightGBM's default is the Platt fit (its isotonic tables had a few levels: deep blocks
    kept their root's P, and the decider copied whole chains; measurements beside
    CALIBRATION); a configured method wins, and the bundled files show each kind's default."""
    assert CALIBRATION == {"recency": "isotonic", "rule": "isotonic", "lgbm": "platt",
                           "tcn": "isotonic"}  # fmt: skip
    for kind, method in CALIBRATION.items():
        assert parse_config(TrainConfig, {"model": {"kind": kind}}).calibration_method == method
        assert train_config(None, None, None, None, False, kind).calibration_method == method
    path = tmp_path / "train.yaml"
    path.write_text("model:\n  kind: lgbm\ncalibration:\n  method: isotonic\n")
    assert load_config(TrainConfig, path).calibration_method == "isotonic"
    for file in sorted(CONFIGS.glob("*.yaml")):
        cfg = load_config(TrainConfig, file)
        assert cfg.calibration.method == CALIBRATION[cfg.kind], file.name


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("-1.0e-6", "greater than or equal to 0 (got -1e-06)"),
        ("0.5", "less than or equal to 0.01 (got 0.5)"),
        (".nan", "finite number (got nan)"),
        (".inf", "finite number (got inf)"),
        ("tight", "valid number (got 'tight')"),
        ("true", "valid number (got True)"),
    ],
)
def test_a_parity_tolerance_out_of_range_is_refused_naming_it(
    value: str, reason: str, tmp_path: Path
) -> None:
    """Negative: no export could pass; above 0.01, NaN or infinite: no broken export could
    fail (a tolerance of inf would turn the check off without saying so)."""
    path = tmp_path / "train.yaml"
    path.write_text(f"model:\n  kind: lgbm\nexport:\n  parity_tolerance: {value}\n")
    with pytest.raises(ConfigError) as err:
        load_config(TrainConfig, path)
    assert re.search(r"train\.yaml: key 'export\.parity_tolerance': ", str(err.value))
    assert reason in str(err.value)


def test_trace_and_features_options_together_are_refused(tmp_path: Path) -> None:
    """``--features`` skips the replay: with ``--trace`` beside it the trace was ignored."""
    with pytest.raises(ValueError, match="--trace or --features, not both"):
        train_config(None, "bundled:synthetic", tmp_path / "f", None, False, "rule")
    cfg = train_config(None, "bundled:synthetic", None, None, False, "rule")
    assert cfg.data.trace == "bundled:synthetic" and cfg.data.features is None


def test_features_on_the_command_line_resets_the_configs_replay_settings(
    tmp_path: Path,
) -> None:
    """``--features`` wins over the file's replay settings as ``--trace`` wins over its
    ``features``: a config made for a replay (its own trace, policy, sampling ...) trains on
    the table given instead of being refused for settings the table makes moot."""
    path = tmp_path / "train.yaml"
    path.write_text(
        "model:\n  kind: rule\ndata:\n  trace: other.jsonl\n  format: mooncake\n"
        "  skip_bad: true\n  simulator_config: sim.yaml\n  features_config: f.yaml\n"
        "  policy: llmd_precise\n  time_scale: 2\n  negative_keep: 0.5\n"
        "  features: old.parquet\n  label: label_burst_k2\n"
    )
    table = tmp_path / "features.parquet"
    cfg = train_config(path, None, table, None, False)
    assert cfg.data.features == table and cfg.data.label == "label_burst_k2"  # label kept
    for key in REPLAY_KEYS:
        assert getattr(cfg.data, key) == DataConfig.model_fields[key].default, key
    with pytest.raises(ConfigError, match=re.escape("data.trace='other.jsonl'")):  # the file alone
        train_config(path, None, None, None, False)


def test_train_help_says_which_file_settings_each_data_option_resets() -> None:
    r = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", r.output).split())
    assert "clears the config's data.features" in text
    keys = ", ".join(f"data.{key}" for key in REPLAY_KEYS)
    assert f"resets the config's replay settings ({keys}) to their defaults" in text


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("negative_keep: 0.5", "data.negative_keep=0.5"),
        ("negative_keep: 1.0", "data.negative_keep=1.0"),
        ("trace: other.jsonl", "data.trace='other.jsonl'"),
        ("format: mooncake", "data.format='mooncake'"),
        ("skip_bad: true", "data.skip_bad=True"),
        ("simulator_config: sim.yaml", "data.simulator_config='sim.yaml'"),
        ("features_config: f.yaml", "data.features_config='f.yaml'"),
        ("policy: llmd_precise", "data.policy='llmd_precise'"),
        ("time_scale: 2", "data.time_scale=2.0"),
    ],
)
def test_a_replay_setting_beside_a_features_table_is_refused_naming_key_value_and_file(
    line: str, named: str, tmp_path: Path
) -> None:
    """``data.features`` skips the replay: a replay setting beside it was silently ignored
    (a table sampled at 0.25 trained on as if ``negative_keep: 1.0`` had been applied)."""
    path = tmp_path / "train.yaml"
    path.write_text(f"data:\n  features: t.parquet\n  {line}\n")
    with pytest.raises(ConfigError) as err:
        load_config(TrainConfig, path)
    message = str(err.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert named in message and "data.features='t.parquet'" in message
    path.write_text(f"data:\n  {line}\n")  # the same setting with a replay is taken
    load_config(TrainConfig, path)


def test_replay_settings_left_at_their_defaults_beside_a_features_table_are_accepted(
    tmp_path: Path,
) -> None:
    """The bundled configs show every key with its default: only a setting that would change
    the replay is refused."""
    path = tmp_path / "train.yaml"
    path.write_text(
        "data:\n  features: t.parquet\n  trace: bundled:conversation\n  format: auto\n"
        "  skip_bad: false\n  simulator_config: null\n  features_config: null\n"
        "  policy: dynamo_kv\n  time_scale: 1.0\n  negative_keep: null\n  label: label_burst_k2\n"
    )
    cfg = load_config(TrainConfig, path)
    assert cfg.data.features == Path("t.parquet") and cfg.data.label == "label_burst_k2"
    assert set(DataConfig.model_fields) - set(REPLAY_KEYS) == {"features", "label"}


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_train_config_file_loads_with_a_trace_and_over_a_features_table(
    path: Path, tmp_path: Path
) -> None:
    """Each bundled config trains on its trace, and with ``--features`` on a table instead:
    none sets a replay setting the table would make it ignore."""
    cfg = load_config(TrainConfig, path)
    assert cfg.data.features is None
    if cfg.kind == "tcn":  # its windows need every candidate row: null resolves to 1.0
        assert cfg.data.negative_keep == 1.0
    features = tmp_path / "features.parquet"
    cfg = train_config(path, None, features, None, False)
    assert cfg.data.features == features
