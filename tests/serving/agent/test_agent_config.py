"""Agent configuration: validated, frozen, secrets hidden."""

from __future__ import annotations

import re

import pytest

from kvcast.config import ConfigError, parse_config
from kvcast.serving.agent import AgentConfig


def test_quota_above_capacity_is_refused_naming_the_problem() -> None:
    with pytest.raises(ConfigError, match="speculative_quota_bytes"):
        parse_config(AgentConfig, {"capacity_bytes": 10, "speculative_quota_bytes": 11})


@pytest.mark.parametrize(
    "listen",
    [
        "nohost",
        "host:",
        "host:99999",
        ":80",
        "http://0.0.0.0:8480",
        "a b:1",
        " h:1",
        "::1:80",
        "a b:99999",
        ":99999",
    ],
)
def test_malformed_listen_address_is_refused(listen: str) -> None:
    data = {"capacity_bytes": 10, "speculative_quota_bytes": 1, "listen": listen}
    why = "is out of range" if listen == "host:99999" else "address must be HOST:PORT"
    with pytest.raises(ConfigError, match=f"listen: .*{why}"):
        parse_config(AgentConfig, data)


def test_unknown_keys_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown key"):
        parse_config(AgentConfig, {"capacity_bytes": 1, "speculative_quota_bytes": 0, "x": 1})


def test_token_is_never_printed() -> None:
    cfg = AgentConfig(capacity_bytes=10, speculative_quota_bytes=1, token="s3cret")
    assert "s3cret" not in repr(cfg) and cfg.token_value == "s3cret"
    assert AgentConfig(capacity_bytes=10, speculative_quota_bytes=1).token_value is None


def test_a_token_too_long_for_a_transfer_hello_is_refused_at_start() -> None:
    """The longest node id and a token at the limit fit in a Hello (4 KiB); a longer token
    would fail every pull, so it is refused up front."""
    from kvcast.serving.agent import Agent

    data = {"node_id": "\u00e9" * 128, "capacity_bytes": 10, "speculative_quota_bytes": 1}
    Agent(parse_config(AgentConfig, data | {"token": "x" * 2048}))  # 2048 bytes: fits
    with pytest.raises(ConfigError, match="token must be at most 2048 bytes"):
        parse_config(AgentConfig, data | {"token": "x" * 2049})


@pytest.mark.parametrize("key", ["connect_timeout_s", "request_timeout_s", "shutdown_grace_s"])
def test_an_infinite_time_is_refused(key: str) -> None:
    data = {"node_id": "a", "capacity_bytes": 1024, "speculative_quota_bytes": 0}
    with pytest.raises(ConfigError, match=rf"key '{key}': .*finite number"):
        parse_config(AgentConfig, data | {key: float("inf")})


def test_a_quota_error_does_not_print_the_token() -> None:
    data = {"node_id": "a", "capacity_bytes": 10, "speculative_quota_bytes": 20}
    with pytest.raises(ConfigError) as err:
        parse_config(AgentConfig, data | {"token": "s3cr3t-TOKEN"})
    assert "s3cr3t" not in str(err.value) and "speculative_quota" in str(err.value)


def test_a_pool_slot_larger_than_the_capacity_is_refused() -> None:
    data = {"node_id": "a", "capacity_bytes": 1024, "speculative_quota_bytes": 0}
    with pytest.raises(ConfigError, match=r"pool_slot_bytes .* must not exceed capacity_bytes"):
        parse_config(AgentConfig, data | {"pool_slot_bytes": 4096})


def test_a_backoff_base_above_its_max_is_refused() -> None:
    """The delay is min(max, base * 2**k): a base above the max was silently capped."""
    data = {"node_id": "a", "capacity_bytes": 1024, "speculative_quota_bytes": 0}
    with pytest.raises(ConfigError, match=r"backoff_base_s \(2.0\) must not exceed backoff_max_s"):
        parse_config(AgentConfig, data | {"backoff_base_s": 2.0, "backoff_max_s": 1.0})
    same = parse_config(AgentConfig, data | {"backoff_base_s": 1.0, "backoff_max_s": 1.0})
    assert same.backoff_base_s == same.backoff_max_s  # a constant delay


@pytest.mark.parametrize(
    ("listen", "transfer"),
    [("127.0.0.1:8470", "127.0.0.1:8470"), ("[::1]:9", "[::1]:9"), ("Agent-0:9", "agent-0:9")],
)
def test_the_same_address_for_both_servers_is_refused(listen: str, transfer: str) -> None:
    """The transfer server's bind failed only at start."""
    data = {"capacity_bytes": 10, "speculative_quota_bytes": 1}
    with pytest.raises(ConfigError, match="listen and transfer_listen are the same address"):
        parse_config(AgentConfig, data | {"listen": listen, "transfer_listen": transfer})


@pytest.mark.parametrize(
    ("listen", "transfer"),
    [("127.0.0.1:0", "127.0.0.1:0"), ("127.0.0.1:8470", "127.0.0.1:8471"), ("a:9", "b:9")],
)
def test_distinct_or_ephemeral_addresses_are_accepted(listen: str, transfer: str) -> None:
    data = {"capacity_bytes": 10, "speculative_quota_bytes": 1}
    cfg = parse_config(AgentConfig, data | {"listen": listen, "transfer_listen": transfer})
    assert (cfg.listen, cfg.transfer_listen) == (listen, transfer)


@pytest.mark.parametrize(
    ("listen", "transfer"),
    [("0.0.0.0:8470", "127.0.0.1:8470"), ("10.0.0.5:8470", "0.0.0.0:8470"),
     ("[::]:8470", "127.0.0.1:8470"), ("0.0.0.0:8470", "agent-0:8470"),
     ("[::1]:8470", "[::]:8470")],
)  # fmt: skip
def test_a_wildcard_and_an_address_on_the_same_port_are_refused(listen: str, transfer: str) -> None:
    """0.0.0.0 takes the port on every IPv4 address (:: on every address): the other server's
    bind failed only at start, with an "Address already in use" naming neither."""
    data = {"capacity_bytes": 10, "speculative_quota_bytes": 1}
    with pytest.raises(ConfigError, match=rf"listen '{re.escape(listen)}' and transfer_listen "
                       rf"'{re.escape(transfer)}' overlap: a wildcard"):  # fmt: skip
        parse_config(AgentConfig, data | {"listen": listen, "transfer_listen": transfer})


@pytest.mark.parametrize(
    ("listen", "transfer"),
    [("0.0.0.0:8470", "0.0.0.0:8471"), ("0.0.0.0:8470", "[::1]:8470"),
     ("127.0.0.1:8470", "127.0.0.2:8470")],
)  # fmt: skip
def test_addresses_that_do_not_collide_are_accepted(listen: str, transfer: str) -> None:
    data = {"capacity_bytes": 10, "speculative_quota_bytes": 1}
    cfg = parse_config(AgentConfig, data | {"listen": listen, "transfer_listen": transfer})
    assert (cfg.listen, cfg.transfer_listen) == (listen, transfer)


@pytest.mark.parametrize("value", [0, -1, float("inf"), float("nan")])
def test_a_transfer_tls_handshake_bound_that_is_not_a_positive_time_is_refused_naming_it(
    value: float,
) -> None:
    """The transfer server's bound on a peer's TLS handshake, in the config and in the server
    itself: a positive number of seconds (5 by default), else an error naming it and the value."""
    data = {"node_id": "a", "capacity_bytes": 1024, "speculative_quota_bytes": 0}
    assert parse_config(AgentConfig, data).transfer_tls_handshake_timeout_s == 5.0
    cfg = parse_config(AgentConfig, data | {"transfer_tls_handshake_timeout_s": 0.5})
    assert cfg.transfer_tls_handshake_timeout_s == 0.5
    with pytest.raises(
        ConfigError, match=rf"key 'transfer_tls_handshake_timeout_s': .*\(got {value}\)"
    ):
        parse_config(AgentConfig, data | {"transfer_tls_handshake_timeout_s": value})
    from kvcast.serving.agent import BlockStore, TransferServer

    assert TransferServer(BlockStore(1024, 0)).tls_handshake_timeout_s == 5.0
    with pytest.raises(
        ValueError,
        match=rf"tls_handshake_timeout_s must be a positive number of seconds, got {value}",
    ):
        TransferServer(BlockStore(1024, 0), tls_handshake_timeout_s=value)
