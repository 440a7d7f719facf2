"""The sidecar config: node names unique, link pairs name known nodes, a replay socket needs
an engine, agents are URLs; derived values (feature nodes, block bytes) follow the config;
configs/serving/sidecar.yaml documents TLS on the API, off by default."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from kvcast.config import load_config
from kvcast.serving.http.server_config import ServerTlsConfig
from kvcast.serving.sidecar.config import SidecarConfig

NODES = [{"name": "a"}, {"name": "b"}, {"name": "c"}]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"nodes": [{"name": "a"}, {"name": "a"}]}, "node names must be unique"),
        ({"links": {"pairs": [{"a": "a", "b": "z"}]}}, "unknown node 'z'"),
        ({"nodes": [{"name": "a", "replay": "tcp://x:1"}]}, "replay needs engine"),
        ({"nodes": [{"name": "a", "agent": "127.0.0.1:80"}]}, "http(s):// URL"),
        ({"nodes": []}, "at least 1 item"),
        ({"listen": "nowhere"}, "listen: address must be HOST:PORT"),
        ({"listen": "127.0.0.1:99999"}, "listen: port 99999 of '127.0.0.1:99999' is out of range"),
        ({"mode": "loud"}, "'shadow' or 'active'"),
        ({"bogus": 1}, "Extra inputs are not permitted"),
        (  # commands for b would go to a's agent
            {
                "nodes": [
                    {"name": "a", "agent": "http://h:1"},
                    {"name": "b", "agent": "http://h:1/"},
                ]
            },
            "nodes 'a' and 'b' share agent 'http://h:1'",
        ),
        (  # one engine's events would be fed twice, under two node ids
            {"nodes": [{"name": "a", "engine": "tcp://h:5"}, {"name": "b", "engine": "tcp://h:5"}]},
            "share engine 'tcp://h:5'",
        ),
        ({"nodes": [{"name": "a", "tenants": []}]}, "at least 1 item"),  # would serve none
        ({"nodes": [{"name": "a", "tenants": ["t", "t"]}]}, "tenants named twice"),
        ({"tick_ms": float("inf")}, "finite number"),  # the loop's wait overflowed
        ({"shutdown_grace_s": float("inf")}, "finite number"),
        ({"agents": {"timeout_s": float("inf")}}, "finite number"),
    ],
)
def test_inconsistent_configs_are_refused_with_the_reason(extra, message) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        SidecarConfig.model_validate({"nodes": NODES} | extra)


def test_feature_nodes_and_block_bytes_follow_the_config(tmp_path) -> None:
    cfg = SidecarConfig.model_validate({"nodes": NODES})
    assert cfg.feature_config.nodes == 3 and cfg.node_names == ("a", "b", "c")
    assert cfg.kv_block_bytes == 512 * 327_680  # llama-3-70b fp16, 512-token blocks
    features = tmp_path / "f.yaml"
    features.write_text("model: llama-3-8b\nblock_tokens: 16\n")
    cfg = SidecarConfig.model_validate({"nodes": NODES, "features": str(features)})
    assert cfg.kv_block_bytes == 16 * 131_072
    cfg = SidecarConfig.model_validate({"nodes": NODES, "block_bytes": "2MiB"})
    assert cfg.kv_block_bytes == 2 << 20


def test_a_config_error_never_prints_the_token_or_markup(tmp_path) -> None:
    """A cross-field error used to echo the whole mapping, token included; a message is
    printed as text, never as rich markup (a node named '[/]' crashed the printer)."""
    from typer.testing import CliRunner

    from kvcast.cli.app import app

    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes:\n  - name: '[/]'\n    agent: h:1\n")
    r = CliRunner().invoke(
        app, ["serve", "sidecar", "--config", str(bad)], env={"KVCAST_TOKEN": "s3cr3t-TOKEN"}
    )
    assert r.exit_code == 2, r.output
    assert "s3cr3t" not in r.output and "agent must be an http(s):// URL" in r.output
    assert "'[/]'" in r.output and "Traceback" not in r.output


def test_link_pairs_to_self_or_named_twice_are_refused() -> None:
    for pairs, message in (
        ([{"a": "a", "b": "a", "gbps": 1}], "a-a is a node to itself"),
        ([{"a": "a", "b": "b", "gbps": 1}, {"a": "b", "b": "a", "gbps": 9}], "named twice"),
    ):
        with pytest.raises(ValidationError, match=message):
            SidecarConfig.model_validate({"nodes": NODES, "links": {"pairs": pairs}})


def test_mutual_tls_with_plain_http_agents_is_refused_before_anything_starts(
    tmp_path, monkeypatch
) -> None:
    import asyncio

    from kvcast.serving.cluster.certs import make_cluster_certs
    from kvcast.serving.sidecar.service import run_sidecar
    from kvcast.serving.tls import ENV

    files = make_cluster_certs(tmp_path / "tls", ["sidecar"])["sidecar"]
    for k, var in ENV.items():
        monkeypatch.setenv(var, str(getattr(files, k)))
    cfg = SidecarConfig.model_validate({"nodes": [{"name": "a", "agent": "http://h:1"}]})
    with pytest.raises(ValueError, match=r"nodes \['a'\] name http:// agents"):
        asyncio.run(run_sidecar(cfg))


def test_a_min_deadline_above_the_replicate_deadline_is_refused() -> None:
    """The executor clamps a pull's deadline to [min, replicate]: a min above the cap was
    silently overridden by it."""
    agents = {"min_deadline_s": 20.0, "replicate_deadline_s": 10.0}
    with pytest.raises(ValidationError, match=r"min_deadline_s \(20.0\) must not exceed "
                                              r"replicate_deadline_s \(10.0\)"):  # fmt: skip
        SidecarConfig.model_validate({"nodes": NODES, "agents": agents})
    agents = {"min_deadline_s": 10.0, "replicate_deadline_s": 10.0}  # a fixed deadline
    assert SidecarConfig.model_validate({"nodes": NODES, "agents": agents}).agents.min_deadline_s


@pytest.mark.parametrize("tick_ms", [0.001, 0.5])
def test_a_sub_millisecond_tick_is_refused(tick_ms: float) -> None:
    """A tick of a microsecond made the decision loop spin on a CPU."""
    with pytest.raises(ValidationError, match=r"tick_ms\n.*greater than or equal to 1"):
        SidecarConfig.model_validate({"nodes": NODES, "tick_ms": tick_ms})
    assert SidecarConfig.model_validate({"nodes": NODES, "tick_ms": 1}).tick_ms == 1.0


@pytest.mark.parametrize(
    "endpoint",
    [
        "tcp://:5555",  # no host: libzmq accepts it, nothing ever connects
        "tcp://h:70000",
        "tcp://h:0",
        "tcp://h:*",
        "tcp://h",
        "tcp://h:5/",
        "tcp://::1:5",
        "tcp://a b:5",
        "127.0.0.1:5555",  # no transport
        "http://h:5",
        "udp://h:5",
        "ipc://",
        "inproc://",
        "",
    ],
)
def test_a_malformed_engine_endpoint_is_refused_naming_it(endpoint: str) -> None:
    for key, node in (("engine", {"engine": endpoint}),
                      ("replay", {"engine": "tcp://h:1", "replay": endpoint})):  # fmt: skip
        with pytest.raises(ValidationError, match=f"node 'a': {key}") as err:
            SidecarConfig.model_validate({"nodes": [{"name": "a"} | node]})
        assert repr(endpoint) in err.value.errors()[0]["msg"]  # the message, not the input


@pytest.mark.parametrize(
    "endpoint",
    [
        "tcp://127.0.0.1:5557",
        "tcp://[::1]:5557",
        "tcp://engine-0.local:1",
        "ipc:///tmp/kv.sock",
        "ipc://@kv-events",
        "inproc://kv-events",
    ],
)
def test_well_formed_engine_endpoints_are_accepted(endpoint: str) -> None:
    cfg = SidecarConfig.model_validate({"nodes": [{"name": "a", "engine": endpoint}]})
    assert cfg.nodes[0].engine == endpoint


@pytest.mark.parametrize(
    "url",
    [
        "http://h",  # no port
        "http://h:",
        "http://h:0",
        "http://h:99999",
        "http://:80",
        "http://h:80/v1",
        "http://h:80//",
        "http://h:80?x=1",
        "http://h:80/#top",
        "http://a b:80",
        " http://h:80",
        "http://::1:80",
        "HTTP://h:80",
    ],
)
def test_a_malformed_agent_url_is_refused_naming_it(url: str) -> None:
    with pytest.raises(ValidationError, match="node 'a': agent must be") as err:
        SidecarConfig.model_validate({"nodes": [{"name": "a", "agent": url}]})
    assert repr(url) in err.value.errors()[0]["msg"]  # the message, not the input echoed


def test_an_agent_url_with_credentials_is_refused_without_echoing_them() -> None:
    """As the CLI reports it (pydantic's own text echoes the whole input)."""
    from kvcast.config import ConfigError, parse_config

    data = {"nodes": [{"name": "a", "agent": "http://u:s3cr3t@h:1"}]}
    with pytest.raises(ConfigError, match=r"node 'a': agent: .*must not carry credentials") as err:
        parse_config(SidecarConfig, data)
    assert "s3cr3t" not in str(err.value)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8470", "https://agent-0.local:443/", "http://[::1]:8470"]
)
def test_well_formed_agent_urls_are_accepted(url: str) -> None:
    assert SidecarConfig.model_validate({"nodes": [{"name": "a", "agent": url}]}).nodes[0].agent


def test_sidecar_yaml_documents_api_tls_off_by_default_and_each_of_its_keys() -> None:
    path = Path(__file__).resolve().parents[3] / "configs" / "serving" / "sidecar.yaml"
    assert load_config(SidecarConfig, path).tls is None  # plain HTTP unless configured
    text = path.read_text()
    assert "\ntls: null\n" in text
    for key in ServerTlsConfig.model_fields:
        assert f"#   {key}: " in text, f"configs/serving/sidecar.yaml lacks tls.{key}"
