"""Byte sizes in configs and flags: plain bytes or a number with a decimal or binary unit."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcast.config import ConfigError, load_config, parse_config
from kvcast.serving.agent import AgentConfig
from kvcast.serving.agent.config import AgentTenantToken
from kvcast.serving.agent.sizes import parse_size

AGENT_YAML = Path(__file__).resolve().parents[3] / "configs" / "serving" / "agent.yaml"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4096", 4096),
        (4096, 4096),
        ("64GiB", 64 << 30),
        ("64gib", 64 << 30),
        ("1.5 KiB", 1536),
        ("100MB", 100_000_000),
        ("2TB", 2 * 10**12),
        ("7B", 7),
        (" 3MiB ", 3 << 20),
    ],
)
def test_sizes_accept_bytes_and_units(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("64XB", "unknown unit 'XB'"),
        ("1.3B", "whole number of bytes"),
        ("-1GiB", "not a size"),
        ("GiB", "not a size"),
        ("", "not a size"),
        (True, "not a size"),
    ],
)
def test_malformed_sizes_are_refused_with_the_reason(text: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_size(text)  # type: ignore[arg-type]


def test_config_size_keys_accept_units_and_name_the_key_when_bad() -> None:
    cfg = AgentConfig(capacity_bytes="1GiB", speculative_quota_bytes="256MiB")
    assert (cfg.capacity_bytes, cfg.speculative_quota_bytes) == (1 << 30, 256 << 20)
    with pytest.raises(ConfigError, match=r"key 'capacity_bytes'.*not a size"):
        parse_config(AgentConfig, {"capacity_bytes": "lots", "speculative_quota_bytes": 0})


def test_agent_yaml_documents_every_config_key_and_loads() -> None:
    cfg = load_config(AgentConfig, AGENT_YAML)
    assert cfg.capacity_bytes == 64 << 30 and cfg.transfer_listen.endswith(":8471")
    text = AGENT_YAML.read_text()
    for key in AgentConfig.model_fields:
        assert f"\n{key}:" in text, f"configs/serving/agent.yaml lacks {key}"
    assert cfg.tenant_tokens == ()
    for key in AgentTenantToken.model_fields:
        assert f"#   {key}: " in text, f"configs/serving/agent.yaml lacks tenant_tokens.{key}"


def test_http_and_transfer_addresses_are_both_checked() -> None:
    base = {"capacity_bytes": 10, "speculative_quota_bytes": 1}
    for key in ("listen", "transfer_listen"):
        with pytest.raises(ConfigError, match="HOST:PORT, got 'nope'"):
            parse_config(AgentConfig, base | {key: "nope"})
