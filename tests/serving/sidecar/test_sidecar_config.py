"""The sidecar config: node names unique, link pairs name known nodes, a replay socket needs
an engine, agents are URLs; derived values (feature nodes, block bytes) follow the config."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

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
        ({"listen": "nowhere"}, "HOST:PORT"),
        ({"mode": "loud"}, "'shadow' or 'active'"),
        ({"bogus": 1}, "Extra inputs are not permitted"),
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
