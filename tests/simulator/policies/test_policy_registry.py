"""Registry and RoutingConfig: names, creation, determinism, strict config."""

from __future__ import annotations

import random

import pytest

from kvcast.config import ConfigError, parse_config
from kvcast.simulator.model_scorer import is_model_policy
from kvcast.simulator.policies import (
    RoutingConfig,
    UnknownPolicyError,
    create_policy,
    policy_names,
    registry,
)
from kvcast.simulator.policies.base import NodeSnapshot, RoutingContext
from kvcast.simulator.policies.dynamo_kv import DynamoKv

BUILTIN = [
    "aibrix_prefix",
    "dynamo_kv",
    "least_loaded",
    "llmd_precise",
    "mooncake_conductor",
    "prefix_sticky",
    "round_robin",
    "sglang_cache_aware",
]


def _random_ctx(rng: random.Random, n: int = 8) -> RoutingContext:
    nb = rng.randint(1, 20)
    nodes = [
        NodeSnapshot(
            node_id=i,
            outstanding=rng.randint(0, 40),
            queue_len=rng.randint(0, 10),
            inflight_prefill_tokens=rng.randint(0, 50 * 512),
            active_blocks=frozenset(rng.sample(range(10), rng.randint(0, 10))),
            kv_usage=rng.random(),
            est_queue_ms=rng.uniform(0, 500),
        )
        for i in range(n)
    ]
    return RoutingContext(
        now_ms=0.0,
        input_tokens=nb * 512 - rng.randint(0, 511),
        block_hashes=[rng.randint(0, 5) for _ in range(nb)],
        block_tokens=512,
        match_blocks=[rng.choice([0, 0, 1, nb // 2, nb]) for _ in range(n)],
        nodes=nodes,
        prefill_ms=lambda t: 0.08 * t,
        transfer_ms=lambda s, d, b: 13.0 * b,
        session=rng.choice([None, "a", "b"]),
        slo_ms=rng.uniform(50, 2000),
    )


def test_all_builtin_policies_are_registered_on_package_import() -> None:
    assert set(BUILTIN) <= set(policy_names())
    assert policy_names() == sorted(policy_names())


def test_unknown_name_is_a_value_error_listing_the_valid_names() -> None:
    with pytest.raises(UnknownPolicyError) as err:
        create_policy("dynamo", None, num_nodes=4, seed=0)
    assert isinstance(err.value, ValueError)
    for name in policy_names():
        assert name in str(err.value)


# the model policies need a trained model: tests/simulator/test_model_policies.py builds them
@pytest.mark.parametrize("name", [n for n in policy_names() if not is_model_policy(n)])
def test_every_registered_name_creates_a_policy_with_that_name(name: str) -> None:
    policy = create_policy(name, RoutingConfig(), num_nodes=8, seed=0)
    assert policy.name == name


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_policies_route_to_a_valid_node_and_are_deterministic_given_seed(
    name: str,
) -> None:
    a = create_policy(name, None, num_nodes=8, seed=11)
    b = create_policy(name, None, num_nodes=8, seed=11)
    rng = random.Random(5)
    for _ in range(300):
        ctx = _random_ctx(rng)
        da, db = a.route(ctx), b.route(ctx)
        assert da == db
        assert 0 <= da.node < 8
        assert da.pull_from is None or (0 <= da.pull_from < 8 and da.pull_blocks > 0)


def test_routing_config_params_reach_the_policy() -> None:
    cfg = parse_config(RoutingConfig, {"dynamo_kv": {"prefill_load_scale": 2.5}})
    policy = create_policy("dynamo_kv", cfg, num_nodes=4, seed=0)
    assert isinstance(policy, DynamoKv)
    assert policy.params.prefill_load_scale == 2.5


def test_routing_config_has_a_field_per_builtin_policy_with_anchor_defaults() -> None:
    cfg = RoutingConfig()
    for name in BUILTIN:
        spec = registry.policy_spec(name)
        assert getattr(cfg, name) == spec.params_cls()


@pytest.mark.parametrize(
    "data",
    [{"dynamo": {}}, {"dynamo_kv": {"overlap_weight": 1.0}}, {"sglang_cache_aware": {"x": 1}}],
)
def test_routing_config_rejects_unknown_keys(data: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="unknown key"):
        parse_config(RoutingConfig, data)


def test_routing_config_rejects_out_of_range_values() -> None:
    with pytest.raises(ConfigError):
        parse_config(RoutingConfig, {"sglang_cache_aware": {"cache_threshold": 1.5}})


def test_registering_a_second_class_under_a_taken_name_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    class Impostor:
        name: str

    with pytest.raises(ValueError, match="already registered"):
        registry.register_policy("dynamo_kv", RoutingConfig)(Impostor)


def test_num_nodes_must_be_positive() -> None:
    with pytest.raises(ValueError):
        create_policy("round_robin", None, num_nodes=0, seed=0)
