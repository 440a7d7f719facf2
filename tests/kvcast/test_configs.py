"""Every YAML file in configs/ loads into its frozen config class; bad keys are named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvcast.config import ConfigError, FrozenConfig, load_config, parse_config
from kvcast.predictor.decider_config import DeciderConfig
from kvcast.simulator.config import SimConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def config_classes() -> dict[str, type[FrozenConfig]]:
    """configs/<dir>/ or configs/<dir>/<stem> -> the class its files load into."""
    from kvcast.features.config import FeatureConfig
    from kvcast.features.traces.agent_config import AgentTraceConfig
    from kvcast.serving.agent.config import AgentConfig
    from kvcast.serving.sidecar.config import SidecarConfig
    from kvcast.simulator.goal_config import GoalConfig
    from kvcast.training.config import TrainConfig

    return {
        "simulator": SimConfig,
        "decider": DeciderConfig,
        "features": FeatureConfig,
        "serving/agent": AgentConfig,
        "serving/sidecar": SidecarConfig,
        "train": TrainConfig,
        "traces/agent": AgentTraceConfig,
        "goals": GoalConfig,
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


def test_goal_yaml_equals_the_embedded_goal() -> None:
    """``kvcast verdict`` without ``--goal`` judges by the same numbers the file shows."""
    from kvcast.simulator.goal_config import GoalConfig

    path = CONFIGS / "goals" / "predictive-replication.yaml"
    assert load_config(GoalConfig, path) == GoalConfig()


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


STICKY = "routing.prefix_sticky.use_session"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("nodes: true\n", "nodes"),  # once a 1-node cluster
        ('nodes: "8"\n', "nodes"),
        ("nodes: 8.0\n", "nodes"),
        ('slo:\n  factor: "2"\n', "slo.factor"),
        ("slo:\n  factor: true\n", "slo.factor"),
        ('routing:\n  prefix_sticky:\n    use_session: "yes"\n', STICKY),
        ("routing:\n  prefix_sticky:\n    use_session: 1\n", STICKY),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_not_converted(
    tmp_path: Path, text: str, key: str
) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=rf"bad\.yaml: key '{re.escape(key)}'"):
        load_config(SimConfig, p)


def test_numbers_a_config_means_are_read_as_numbers(tmp_path: Path) -> None:
    """An integer for a float, a list for a tuple, and exponent forms YAML 1.1 reads as strings."""
    p = tmp_path / "ok.yaml"
    p.write_text("nodes: 4\nslo:\n  factor: 3\n  floor_ms: 1e2\nnetwork:\n"
                 "  rack:\n    bandwidth_gbps: 1.0e3\n    latency_us: 5\n")  # fmt: skip
    cfg = load_config(SimConfig, p)
    assert (cfg.nodes, cfg.slo.factor, cfg.slo.floor_ms) == (4, 3.0, 100.0)
    assert cfg.network.rack.bandwidth_gbps == 1000.0
    f = tmp_path / "features.yaml"
    f.write_text("queue_windows_ms: [1000, 5000]\n")
    from kvcast.features.config import FeatureConfig

    assert load_config(FeatureConfig, f).queue_windows_ms == (1000.0, 5000.0)
    d = tmp_path / "date.yaml"
    d.write_text("nodes: 2024-01-01\n")
    with pytest.raises(ConfigError, match=r"date\.yaml: a date is not a config value") as err:
        load_config(SimConfig, d)
    assert "2024" not in str(err.value)  # never the value (a token YAML took for a date)


def test_scalars_are_read_as_yaml_1_2_core_not_yaml_1_1(tmp_path: Path) -> None:
    """``off`` / ``yes`` are strings (``arrival_spread: off`` as the default file documents
    it), ``010`` is ten (not octal 8), ``2:00`` is a string (not sexagesimal 120); true/false,
    hex, octal with 0o, digit groups and the special floats still read as written."""
    from kvcast.config import read_yaml

    p = tmp_path / "c.yaml"
    p.write_text("arrival_spread: off\n")
    assert load_config(SimConfig, p).arrival_spread == "off"
    p.write_text("nodes: 010\n")
    assert load_config(SimConfig, p).nodes == 10
    p.write_text("nodes: 2:00\n")
    with pytest.raises(ConfigError, match=r"key 'nodes'"):
        load_config(SimConfig, p)
    p.write_text("nodes: 0x4\nseed: 1_000\n")
    assert (load_config(SimConfig, p).nodes, load_config(SimConfig, p).seed) == (4, 1000)
    p.write_text("a: yes\nb: On\nc: true\nd: FALSE\ne: 0o17\nf: -.inf\ng: .\nh: -0.5e1\n")
    assert read_yaml(p) == {
        "a": "yes", "b": "On", "c": True, "d": False, "e": 15, "f": float("-inf"), "g": ".",
        "h": -5.0,
    }  # fmt: skip


def test_a_key_named_twice_is_refused_with_both_lines(tmp_path: Path) -> None:
    from kvcast.config import read_yaml

    p = tmp_path / "dup.yaml"
    p.write_text("node:\n  gpus: 8\nnodes: 4\nnode:\n  gpus: 4\n")
    with pytest.raises(ConfigError, match=r"dup\.yaml:4: invalid YAML: duplicate key 'node' "
                                          r"\(first on line 1, column 1\)"):  # fmt: skip
        load_config(SimConfig, p)
    p.write_text("node: {gpus: 8, gpus: 4}\n")  # flow style: both on one line
    with pytest.raises(ConfigError, match=r"dup\.yaml:1: .*duplicate key 'gpus' \(first on "
                                          r"line 1, column 8\)"):  # fmt: skip
        load_config(SimConfig, p)
    p.write_text("nodes: !!int 0b100\n")  # an explicit int of a form it does not read
    with pytest.raises(ConfigError, match=r"dup\.yaml:1: invalid YAML: not an integer \(decimal"):
        load_config(SimConfig, p)
    p.write_text("slo:\n  factor: 3\n  floor_ms: 100\n  factor: 5\n")
    with pytest.raises(ConfigError, match=r"dup\.yaml:4: .*duplicate key 'factor'"):
        load_config(SimConfig, p)
    # a merged mapping's key given again is an override, not a duplicate
    p.write_text("base: &b {factor: 3, floor_ms: 100}\nslo:\n  <<: *b\n  factor: 5\n")
    assert read_yaml(p)["slo"] == {"factor": 5, "floor_ms": 100}


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


def test_model_too_big_for_node_memory_is_refused_with_the_config_naming_the_sizes() -> None:
    with pytest.raises(ConfigError) as refused:
        parse_config(SimConfig, {"node": {"gpus": 1}}, "small.yaml")
    assert str(refused.value) == (
        "small.yaml: model llama-3-70b does not fit: 1 x 80.0 GiB at memory_utilization 0.9, "
        "less its 131.5 GiB of bf16 weights and activation_reserve_gib 40, leaves no KV memory "
        "(node.kv_capacity_gib sets it directly)"
    )
    parse_config(SimConfig, {"node": {"gpus": 1, "kv_capacity_gib": 20}}, "small.yaml")


def test_another_model_without_its_own_timing_is_refused_naming_what_to_give() -> None:
    """The default prefill and decode timings are Llama-3-70B's on 8 GPUs: another preset that
    keeps them would run at the 70B's speed unnoticed."""
    with pytest.raises(ConfigError, match=(
        r"^8b\.yaml: model\.preset is llama-3-8b, but node\.prefill and node\.decode keep the "
        r"timing calibrated to llama-3-70b on 8 GPUs: give node\.prefill"
    )):  # fmt: skip
        parse_config(SimConfig, {"model": {"preset": "llama-3-8b"}}, "8b.yaml")
    prefill_only = {"model": {"preset": "llama-3-8b"}, "node": {"prefill": {"a_ms": 5.0}}}
    with pytest.raises(ConfigError, match=r"but node\.decode keeps the timing"):
        parse_config(SimConfig, prefill_only, "8b.yaml")
    timing = {"prefill": {"b_ms_per_token": 0.02}, "decode": {"step_ms": 12.0}}
    cfg = parse_config(SimConfig, {"model": {"preset": "llama-3-8b"}, "node": timing}, "8b.yaml")
    assert cfg.node.prefill.b_ms_per_token == 0.02


def test_a_rule_across_keys_is_reported_as_its_own_message(tmp_path: Path) -> None:
    """A model validator's refusal reads as the file and its message: no '<root>' key and no
    pydantic 'Value error,' prefix in front of it."""
    from kvcast.serving.agent.config import AgentConfig

    p = tmp_path / "agent.yaml"
    p.write_text("capacity_bytes: 1024\nspeculative_quota_bytes: 2048\n")
    with pytest.raises(ConfigError) as refused:
        load_config(AgentConfig, p)
    assert str(refused.value) == (
        f"{p}: speculative_quota_bytes (2048) must not exceed capacity_bytes (1024)"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # pydantic puts the union's tag in the path (model.lgbm.num_leafs); the file has none
        ("model:\n  kind: lgbm\n  num_leafs: 31\n", "key 'model.num_leafs': unknown key"),
        ("model:\n  num_leaves: 31\n",
         "key 'model': 'kind' is required (one of recency, rule, lgbm, tcn)"),
    ],
)  # fmt: skip
def test_a_section_of_alternatives_is_named_as_the_file_spells_it(
    tmp_path: Path, text: str, message: str
) -> None:
    from kvcast.training.config import TrainConfig

    p = tmp_path / "train.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as refused:
        load_config(TrainConfig, p)
    assert str(refused.value) == f"{p}: {message}"


def test_a_directory_given_as_a_config_is_named_as_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"a directory, not a config file"):
        load_config(SimConfig, tmp_path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a section's documented default differs from its class's own (both are tiers)
        ("node:\n  nvme: {capacity_gib: 512}\n", {"node.nvme.bandwidth_gbps": 5.0}),
        ("shared_pool: {capacity_gib: 64}\n", {"shared_pool.bandwidth_gbps": 5.0}),
        # a link given in part keeps the rest of its own defaults
        ("network:\n  datacenter: {bandwidth_gbps: 50}\n",
         {"network.datacenter.latency_us": 50.0, "network.datacenter.bandwidth_gbps": 50.0}),
        ("network:\n  rack: {latency_us: 2}\n", {"network.rack.bandwidth_gbps": 400.0}),
    ],
)  # fmt: skip
def test_a_section_given_in_part_keeps_the_rest_of_its_documented_defaults(
    tmp_path: Path, text: str, expected: dict[str, float]
) -> None:
    p = tmp_path / "sim.yaml"
    p.write_text(text)
    cfg = load_config(SimConfig, p)
    for dotted, value in expected.items():
        got: object = cfg
        for part in dotted.split("."):
            got = getattr(got, part)
        assert got == value, dotted


def test_an_agent_trace_distribution_given_in_part_keeps_its_other_defaults(
    tmp_path: Path,
) -> None:
    from kvcast.features.traces.agent_config import AgentTraceConfig

    p = tmp_path / "agent.yaml"
    p.write_text("tool_s: {median: 10}\n")
    tool = load_config(AgentTraceConfig, p).tool_s
    default = AgentTraceConfig().tool_s
    assert (tool.median, tool.sigma, tool.low, tool.high) == (
        10.0, default.sigma, default.low, default.high,
    )  # fmt: skip


def test_a_section_given_in_part_still_refuses_unknown_keys_and_wrong_types(
    tmp_path: Path,
) -> None:
    p = tmp_path / "sim.yaml"
    p.write_text("network:\n  rack: {latency: 2}\nnode:\n  nvme: {capacity_gib: '1'}\n")
    with pytest.raises(ConfigError) as refused:
        load_config(SimConfig, p)
    msg = str(refused.value)
    assert "key 'network.rack.latency': unknown key" in msg
    assert "key 'node.nvme.capacity_gib'" in msg and "Field required" not in msg


def test_a_value_for_a_union_is_refused_under_its_key_as_the_file_spells_it(
    tmp_path: Path,
) -> None:
    """pydantic names the union member it tried (``arrival_spread.literal['auto','off']``,
    ``arrival_spread.float``): the file has one key, and one line for it."""
    p = tmp_path / "sim.yaml"
    p.write_text("arrival_spread: sometimes\n")
    with pytest.raises(ConfigError) as refused:
        load_config(SimConfig, p)
    assert str(refused.value) == (
        f"{p}: key 'arrival_spread': Input should be 'auto' or 'off', or a valid number "
        "(got 'sometimes')"
    )


def test_an_override_from_code_is_named_as_a_key_and_one_from_the_command_line_as_its_option() -> (
    None
):
    from kvcast.config import with_options, with_overrides

    with pytest.raises(ConfigError, match=r"^<overrides of nodes>: key 'nodes'"):
        with_overrides(SimConfig(), nodes=0)
    with pytest.raises(ConfigError, match=r"^command line \(--nodes\): key 'nodes'"):
        with_options(SimConfig(), nodes=0, seed=None)  # an option not given is not named
    assert with_options(SimConfig(), nodes=None) == SimConfig()


def config_error(cls: type[FrozenConfig], path: Path, text: str) -> str:
    """The ConfigError's message for ``text`` written to ``path`` and loaded as ``cls``."""
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(cls, path)
    return str(err.value)


def test_several_problems_of_one_file_name_the_file_once(tmp_path: Path) -> None:
    p = tmp_path / "two.yaml"
    msg = config_error(SimConfig, p, "nodes: 0\nseed: -1\n")
    assert msg.count(str(p)) == 1 and msg.startswith(f"{p}: key 'nodes'")
    assert "; key 'seed'" in msg


def test_an_unknown_model_preset_is_named_under_its_own_key(tmp_path: Path) -> None:
    p = tmp_path / "m.yaml"
    msg = config_error(SimConfig, p, "model:\n  preset: gpt-5\n")
    assert msg.startswith(f"{p}: key 'model.preset': unknown model preset 'gpt-5'; valid: ")
    assert msg.count("gpt-5") == 1  # the value once, not again as "(got ...)"


def test_a_fixed_length_list_given_too_short_says_so_once(tmp_path: Path) -> None:
    from kvcast.predictor.decider_config import DeciderConfig

    p = tmp_path / "d.yaml"
    msg = config_error(DeciderConfig, p, "targets:\n  tier_penalty_ms: [0, 0]\n")
    assert msg == f"{p}: key 'targets.tier_penalty_ms': too few values: 2 given, 4 needed"


@pytest.mark.parametrize(
    "value",
    ["!Xk29s3cret", "*Xk29s3cret", "!!int Xk29s3cret", "!!float Xk29s3cret",
     "!!bool Xk29s3cret", "!!timestamp Xk29s3cret"],
)  # fmt: skip
def test_an_unquoted_secret_yaml_takes_for_a_tag_or_alias_is_never_shown(
    tmp_path: Path, value: str
) -> None:
    """A token that starts with ``!`` or ``*`` is a tag or an alias to YAML: the error says to
    quote it, in one line, never showing it."""
    from kvcast.serving.sidecar.config import SidecarConfig

    p = tmp_path / "sc.yaml"
    p.write_text(f"nodes: [{{name: a}}]\ntoken: {value}\n")
    with pytest.raises(ConfigError) as err:
        load_config(SidecarConfig, p)
    assert "quote" in str(err.value) or "invalid YAML" in str(err.value), str(err.value)
    assert "k29s3cret" not in str(err.value).lower()


@pytest.mark.parametrize("key", ["token", "ingest_token"])
def test_a_bad_secret_value_is_never_shown_in_a_config_error(tmp_path: Path, key: str) -> None:
    """A secret key's value stays out of the message whatever is wrong with it; other keys'
    values are shown (``b_ms_per_token`` is a number, not a secret)."""
    from kvcast.config import parse_config
    from kvcast.serving.sidecar.config import SidecarConfig

    data = {"nodes": [{"name": "a"}], "token": "shared-ok"}
    for bad in ("s3cret\n", ["s3cret"], {"s3cret": 1}, 12345678):
        with pytest.raises(ConfigError) as err:
            parse_config(SidecarConfig, data | {key: bad}, "sc.yaml")
        assert "s3cret" not in str(err.value) and "12345678" not in str(err.value)
    with pytest.raises(ConfigError, match=r"b_ms_per_token'.*\(got 'fast'\)"):
        parse_config(SimConfig, {"node": {"prefill": {"b_ms_per_token": "fast"}}}, "s.yaml")


@pytest.mark.parametrize("service", ["sidecar", "agent"])
def test_a_bad_token_env_value_is_never_shown_in_a_config_error(service: str) -> None:
    """``token_env`` names a variable, but a secret pasted in its place must not be shown
    either, whatever is wrong with it (not a name, too long, not a string)."""
    from kvcast.config import parse_config
    from kvcast.serving.agent.config import AgentConfig
    from kvcast.serving.sidecar.config import SidecarConfig

    cls, data = (
        (SidecarConfig, {"nodes": [{"name": "a"}]}) if service == "sidecar"
        else (AgentConfig, {"capacity_bytes": 1 << 20, "speculative_quota_bytes": 0})
    )  # fmt: skip
    for bad in ("s3cret-x", "s3cret\n", "s3cret" * 50, 12345678, 1234.5678, ["s3cret"]):
        entry = {"tenants": ["acme"], "token_env": bad}
        with pytest.raises(ConfigError) as err:
            parse_config(cls, data | {"tenant_tokens": [entry]}, "svc.yaml")
        assert "key 'tenant_tokens.0.token_env'" in str(err.value), str(err.value)
        assert "s3cret" not in str(err.value) and "5678" not in str(err.value)


@pytest.mark.parametrize("service", ["sidecar", "agent"])
def test_a_secret_pasted_as_a_tenant_tokens_entry_or_section_is_never_shown(service: str) -> None:
    """The section and its entries hold mappings: a plain value there (the token itself, say)
    is refused at its key without being shown; an entry's tenant names still are shown."""
    from kvcast.config import parse_config
    from kvcast.serving.agent.config import AgentConfig
    from kvcast.serving.sidecar.config import SidecarConfig

    cls, data = (
        (SidecarConfig, {"nodes": [{"name": "a"}]}) if service == "sidecar"
        else (AgentConfig, {"capacity_bytes": 1 << 20, "speculative_quota_bytes": 0})
    )  # fmt: skip
    for tokens, key in ((["s3cret-x"], "tenant_tokens.0"), ("s3cret-x", "tenant_tokens"),
                        ([12345678], "tenant_tokens.0")):  # fmt: skip
        with pytest.raises(ConfigError) as err:
            parse_config(cls, data | {"tenant_tokens": tokens}, "svc.yaml")
        assert f"key '{key}'" in str(err.value), str(err.value)
        assert "s3cret" not in str(err.value) and "5678" not in str(err.value)
    entry = {"tenants": ["bad\ttenant"], "token_env": "KT_ACME"}
    with pytest.raises(ConfigError, match=r"got 'bad\\ttenant'"):
        parse_config(cls, data | {"tenant_tokens": [entry]}, "svc.yaml")
