"""What ``kvcast cluster up`` writes and reads: the sidecar's and the decider's configs for
the cluster, the addresses file (loopback only), free ports, the default model and the
refusal that says how to train one, and the bytes a replayed block is stored with."""

from __future__ import annotations

import random
import re
import socket
from pathlib import Path

import pytest
from onnx_models import write_recency_model

from kvcast.config import load_config
from kvcast.features.config import FeatureConfig
from kvcast.features.spec import build_spec
from kvcast.predictor.decider_config import DeciderConfig
from kvcast.serving.agent.checksum import checksum
from kvcast.serving.cluster.blocks import BlockMaker
from kvcast.serving.cluster.config_gen import (
    decider_data,
    feature_spec,
    sidecar_data,
    write_configs,
)
from kvcast.serving.cluster.layout import ClusterLayout, NodeAddresses, read_layout
from kvcast.serving.cluster.model_choice import (
    TRAIN_COMMAND,
    check_model,
    choose_model,
    recency_model_path,
)
from kvcast.serving.cluster.ports import (
    ephemeral_range,
    free_ports,
    is_loopback,
    require_loopback,
    reserved_candidates,
)
from kvcast.serving.cluster.summary import by_label, parse_metrics
from kvcast.serving.sidecar.config import SidecarConfig


def test_the_generated_sidecar_config_lists_the_nodes_in_order_and_loads(tmp_path: Path) -> None:
    data = sidecar_data(
        agents=["http://127.0.0.1:1", "http://127.0.0.1:2"],
        engines=[("tcp://127.0.0.1:3", "tcp://127.0.0.1:4"), ("tcp://127.0.0.1:5", None)],
        mode="active", model="m.onnx", block_bytes=16384, workdir=tmp_path,
    )  # fmt: skip
    path = write_configs(tmp_path, data, decider_data(0.25))
    cfg = load_config(SidecarConfig, path)
    assert cfg.node_names == ("gpu-node-0", "gpu-node-1") and cfg.mode == "active"
    assert [(n.agent, n.engine, n.replay) for n in cfg.nodes] == [
        ("http://127.0.0.1:1", "tcp://127.0.0.1:3", "tcp://127.0.0.1:4"),
        ("http://127.0.0.1:2", "tcp://127.0.0.1:5", None),
    ]
    assert cfg.kv_block_bytes == 16384 and cfg.listen == "127.0.0.1:0"
    assert cfg.decision_log.path == str(tmp_path / "decisions.parquet")
    decider = load_config(DeciderConfig, tmp_path / "decider.yaml")
    assert decider.costs.safety_margin_gib == 0.0
    assert decider.budgets.speculative_quota_fraction == 0.25
    assert feature_spec(path) == build_spec(cfg.feature_config)
    with pytest.raises(ValueError, match="one engine endpoint pair per agent"):
        sidecar_data(agents=["http://127.0.0.1:1"], engines=[], mode="shadow", model="m",
                     block_bytes=1, workdir=tmp_path)  # fmt: skip


def test_the_addresses_round_trip_and_stay_on_loopback(tmp_path: Path) -> None:
    node = NodeAddresses("gpu-node-0", "http://127.0.0.1:10", "127.0.0.1:11", "tcp://127.0.0.1:12")
    layout = ClusterLayout("http://127.0.0.1:9", (node,), token_env="T", pids={"sidecar": 5})
    layout.write(tmp_path)
    assert read_layout(tmp_path) == layout
    assert '"token"' not in (tmp_path / "cluster.json").read_text()  # only the variable's name
    with pytest.raises(ValueError, match="is `kvcast cluster up` running there"):
        read_layout(tmp_path / "nowhere")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "cluster.json").write_text('{"sidecar": 1}')
    with pytest.raises(ValueError, match="not a kvcast cluster description"):
        read_layout(tmp_path / "bad")
    with pytest.raises(ValueError, match="not a loopback address"):
        NodeAddresses("n", "http://10.0.0.1:10", "127.0.0.1:11")
    with pytest.raises(ValueError, match="sidecar"):
        ClusterLayout("http://example.com:9", (node,))


def test_loopback_checks_and_free_ports() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("[::1]")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.2")
    assert require_loopback("http://127.0.0.1:80/", "x") == "http://127.0.0.1:80"
    assert require_loopback("127.0.0.2:7", "x") == "127.0.0.2:7"
    for bad in ("notaurl", "http://127.0.0.1", "http://127.0.0.1:99999", "127.0.0.1:x"):
        with pytest.raises(ValueError, match=f"--sidecar: '{bad}' is not an address"):
            require_loopback(bad, "--sidecar")
    ports = free_ports(5)
    assert len(set(ports)) == 5


def test_reserved_ports_lie_outside_the_ephemeral_range(tmp_path: Path) -> None:
    ports = free_ports(6, outside_ephemeral=True, ephemeral=(20000, 60999))
    assert len(set(ports)) == 6
    assert all(1024 <= p < 20000 or p > 60999 for p in ports), ports
    # a range covering every unprivileged port leaves nothing outside: port 0 serves
    assert reserved_candidates((1024, 65535)) == []
    assert len(set(free_ports(3, outside_ephemeral=True, ephemeral=(1024, 65535)))) == 3
    # taken candidates are skipped, not reported
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        rng = random.Random(0)
        got = free_ports(1, outside_ephemeral=True, ephemeral=(port + 1, 65535), rng=rng)
        assert got != [port]
    (tmp_path / "range").write_text("32768\t60999\n")
    assert ephemeral_range(tmp_path / "range") == (32768, 60999)
    assert ephemeral_range(tmp_path / "absent") == (49152, 65535)
    for port in ports:  # each can be bound now
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_without_a_model_the_start_is_refused_with_how_to_train_one(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no --model given") as refused:
        choose_model(None, cwd=tmp_path)
    assert "`kvcast train --kind recency`" in str(refused.value)
    assert "\n" not in str(refused.value)
    trained = tmp_path / "kvcast-out/train/recency/model.onnx"
    trained.parent.mkdir(parents=True)
    trained.write_bytes(b"x")
    assert choose_model(None, cwd=tmp_path) == str(trained)
    with pytest.raises(ValueError, match="no such file"):
        choose_model(str(tmp_path / "missing.onnx"))
    assert choose_model("models:/kvcast@champion") == "models:/kvcast@champion"


def test_the_recency_configs_out_dir_is_where_the_default_model_is_looked_for(
    tmp_path: Path,
) -> None:
    config = tmp_path / "configs/train/recency.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("model: {kind: recency}\nout_dir: runs/{kind}-model\n")
    trained = tmp_path / "runs/recency-model/model.onnx"
    trained.parent.mkdir(parents=True)
    trained.write_bytes(b"x")
    assert choose_model(None, cwd=tmp_path) == str(trained)


def test_a_model_is_checked_against_the_sidecars_feature_spec(tmp_path: Path) -> None:
    spec = build_spec(FeatureConfig())
    check_model(str(write_recency_model(tmp_path / "ok.onnx", spec)), spec)
    other = build_spec(FeatureConfig(queue_windows_ms=(5000.0,)))
    with pytest.raises(ValueError, match="feature spec differs"):
        check_model(str(write_recency_model(tmp_path / "other.onnx", other)), spec)
    check_model("models:/kvcast@champion", spec)  # the registry is the sidecar's to ask


def test_a_blocks_bytes_depend_only_on_seed_tenant_and_hash() -> None:
    maker = BlockMaker(4096, seed=1)
    data, digest = maker.make("acme", 42)
    assert len(data) == 4096 and digest == checksum(data) == maker.checksum("acme", 42)
    assert BlockMaker(4096, seed=1).data("acme", 42) == data
    assert maker.data("acme", 43) != data and maker.data("other", 42) != data
    assert BlockMaker(4096, seed=2).data("acme", 42) != data
    with pytest.raises(ValueError):
        BlockMaker(0)


def test_metrics_are_keyed_by_name_and_sorted_labels() -> None:
    text = (
        "# TYPE kvcast_sidecar_decisions_total counter\n"
        'kvcast_sidecar_decisions_total{kind="replicate"} 3.0\n'
        'kvcast_sidecar_decisions_total{kind="evict"} 1.0\n'
        "# TYPE kvcast_agent_bytes_pulled_total counter\n"
        "kvcast_agent_bytes_pulled_total 4096.0\n"
    )
    m = parse_metrics(text)
    assert m["kvcast_agent_bytes_pulled_total"] == 4096.0
    assert by_label(m, "kvcast_sidecar_decisions_total") == {"replicate": 3.0, "evict": 1.0}


def test_the_command_suggested_writes_the_model_where_it_is_looked_for(tmp_path: Path) -> None:
    """`kvcast train --kind recency` (or, beside a recency config, `--config` with it) is the
    command the refusal names, and its model is the one found next time."""
    from kvcast.cli.train import train_config

    with pytest.raises(ValueError, match=re.escape(f"`{TRAIN_COMMAND}`")):
        choose_model(None, cwd=tmp_path)
    cfg = train_config(None, None, None, None, False, kind="recency")
    assert tmp_path / cfg.output_dir / "model.onnx" == recency_model_path(tmp_path)
    config = tmp_path / "configs/train/recency.yaml"
    config.parent.mkdir(parents=True)
    config.write_text("model: {kind: recency}\nout_dir: elsewhere/{kind}\n")
    with_config = re.escape("`kvcast train --config configs/train/recency.yaml`")
    with pytest.raises(ValueError, match=with_config):
        choose_model(None, cwd=tmp_path)
    assert recency_model_path(tmp_path) == tmp_path / "elsewhere/recency/model.onnx"
