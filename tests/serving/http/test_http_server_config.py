"""The ``http:`` bounds of the sidecar's and the agents' configs: both YAML files in
configs/serving/ document every one with its default, sizes take units, and a
``limit_concurrency`` that would refuse every request (a request's own connection counts) is
refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcast.config import ConfigError, load_config, parse_config
from kvcast.serving.agent.config import AgentConfig
from kvcast.serving.http.server_config import HttpServerConfig
from kvcast.serving.sidecar.config import SidecarConfig

SERVING = Path(__file__).resolve().parents[3] / "configs" / "serving"


@pytest.mark.parametrize(
    ("name", "cls"), [("sidecar.yaml", SidecarConfig), ("agent.yaml", AgentConfig)]
)
def test_each_service_yaml_documents_every_http_bound_with_its_default(name, cls) -> None:
    path = SERVING / name
    assert load_config(cls, path).http == HttpServerConfig()
    text = path.read_text()
    for key in HttpServerConfig.model_fields:
        assert f"\n  {key}: " in text, f"configs/serving/{name} lacks http.{key}"


def test_http_bounds_take_sizes_with_units_and_refuse_a_limit_that_refuses_everything() -> None:
    assert HttpServerConfig(max_incomplete_head_bytes="32KiB").max_incomplete_head_bytes == 32768
    with pytest.raises(ConfigError, match=r"key 'limit_concurrency'.*greater than or equal to 2"):
        parse_config(HttpServerConfig, {"limit_concurrency": 1})
    with pytest.raises(ConfigError, match=r"key 'header_timeout_s'.*finite"):
        parse_config(HttpServerConfig, {"header_timeout_s": float("inf")})


def test_a_connection_cap_below_limit_concurrency_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError, match=r"max_connections \(8\).*limit_concurrency \(16\)"):
        parse_config(HttpServerConfig, {"limit_concurrency": 16, "max_connections": 8})
    assert HttpServerConfig(limit_concurrency=16, max_connections=16).max_connections == 16


@pytest.mark.parametrize(
    ("value", "why"),
    [(0, "greater than 0"), (-1.5, "greater than 0"), (float("inf"), "finite number"),
     ("soon", "valid number")],
)  # fmt: skip
def test_a_tls_handshake_bound_that_is_not_a_positive_time_is_refused_naming_it(
    value: object, why: str
) -> None:
    """The bound on a TLS handshake (``http.tls_handshake_timeout_s``): a positive number of
    seconds, 5 by default; anything else is one line naming the key and the value given."""
    assert HttpServerConfig().tls_handshake_timeout_s == 5.0
    cfg = parse_config(HttpServerConfig, {"tls_handshake_timeout_s": 0.25})
    assert cfg.tls_handshake_timeout_s == 0.25
    with pytest.raises(
        ConfigError, match=rf"key 'tls_handshake_timeout_s': .*{why} \(got '?{value}'?\)"
    ):
        parse_config(HttpServerConfig, {"tls_handshake_timeout_s": value})


def test_a_services_tls_handshake_bound_error_names_its_section_and_file(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.yaml"
    path.write_text("nodes: [{name: gpu-0}]\nhttp:\n  tls_handshake_timeout_s: -2\n")
    key = r"sidecar\.yaml: key 'http\.tls_handshake_timeout_s': "
    with pytest.raises(ConfigError, match=key + r"Input should be greater than 0 \(got -2\)"):
        load_config(SidecarConfig, path)
