"""Every YAML file in configs/ loads into its frozen config class; bad keys are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcast.config import ConfigError, FrozenConfig, load_config
from kvcast.predictor.decider_config import DeciderConfig
from kvcast.simulator.config import SimConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def config_classes() -> dict[str, type[FrozenConfig]]:
    """configs/<dir>/ or configs/<dir>/<stem> -> the class its files load into."""
    from kvcast.features.config import FeatureConfig
    from kvcast.features.traces.agent_config import AgentTraceConfig
    from kvcast.serving.agent.config import AgentConfig
    from kvcast.serving.sidecar.config import SidecarConfig
    from kvcast.training.config import TrainConfig

    return {
        "simulator": SimConfig,
        "decider": DeciderConfig,
        "features": FeatureConfig,
        "serving/agent": AgentConfig,
        "serving/sidecar": SidecarConfig,
        "train": TrainConfig,
        "traces/agent": AgentTraceConfig,
    }


def config_class_for(path: Path) -> type[FrozenConfig]:
    rel = path.relative_to(CONFIGS)
    classes = config_classes()
    for key in (f"{rel.parent.as_posix()}/{rel.stem}", rel.parent.as_posix()):
        if key in classes:
            return classes[key]
    raise AssertionError(f"{path}: no config class registered for configs/{rel}")


ALL_FILES = sorted(CONFIGS.rglob("*.yaml"))


def test_configs_directory_has_files() -> None:
    assert ALL_FILES, f"no YAML under {CONFIGS}"


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: str(p.relative_to(CONFIGS)))
def test_every_config_file_loads_into_its_class(path: Path) -> None:
    cls = config_class_for(path)
    assert isinstance(load_config(cls, path), cls)


def test_default_simulator_yaml_equals_the_embedded_defaults() -> None:
    assert load_config(SimConfig, CONFIGS / "simulator" / "default.yaml") == SimConfig()


def test_config_objects_are_frozen() -> None:
    cfg = SimConfig()
    with pytest.raises(Exception, match="frozen"):
        cfg.nodes = 3  # type: ignore[misc]


def test_unknown_key_error_names_file_and_dotted_key(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("node:\n  prefill:\n    a_ms: 1.0\n    bogus: 2\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: key 'node\.prefill\.bogus': unknown key"):
        load_config(SimConfig, p)


def test_wrong_type_error_names_key_expected_and_value(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("nodes: eight\n")
    with pytest.raises(ConfigError, match=r"key 'nodes': .*integer.*'eight'"):
        load_config(SimConfig, p)


def test_out_of_range_value_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("node:\n  memory_utilization: 1.5\n")
    with pytest.raises(ConfigError, match=r"node\.memory_utilization"):
        load_config(SimConfig, p)


def test_invalid_yaml_reports_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("nodes: 8\nnode: [1,\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:\d+: invalid YAML"):
        load_config(SimConfig, p)


def test_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(SimConfig, tmp_path / "nope.yaml")


def test_model_too_big_for_node_memory_is_reported() -> None:
    cfg = SimConfig.model_validate({"node": {"gpus": 1}})
    with pytest.raises(ValueError, match="does not fit"):
        cfg.kv_capacity_bytes()
