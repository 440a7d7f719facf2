"""Block meta arithmetic: partial last blocks, GQA KV bytes, the quadratic prefill model."""

from __future__ import annotations

import numpy as np

from kvcast.features.block_meta import (
    block_tokens,
    kv_bytes_per_token,
    prefill_ms,
    tenant_code,
    whole_blocks,
    whole_blocks_of,
)
from kvcast.features.config import FeatureConfig
from kvcast.features.derive import meta_columns


def test_the_last_block_of_a_prompt_holds_the_remaining_tokens() -> None:
    # 6758 tokens in 14 blocks of 512: 13 full blocks, the last holds 102
    assert block_tokens(6758.0, 13.0, 512) == 102
    assert block_tokens(6758.0, 0.0, 512) == 512
    assert block_tokens(100.0, 5.0, 512) == 1  # inconsistent lengths never give 0 or less


def test_kv_bytes_use_the_real_kv_heads_of_the_model() -> None:
    assert kv_bytes_per_token(FeatureConfig()) == 327_680  # Llama-3-70B fp16: 160 MiB / block
    assert kv_bytes_per_token(FeatureConfig(model="llama-3-8b")) == 131_072


def test_prefill_is_a_plus_bn_plus_cn2_and_zero_for_no_tokens() -> None:
    cfg = FeatureConfig(prefill={"a_ms": 10.0, "b_ms_per_token": 0.1, "c_ms_per_token2": 1e-5})
    assert prefill_ms(1000.0, cfg) == 10.0 + 100.0 + 10.0
    assert prefill_ms(0.0, cfg) == 0.0
    assert np.isnan(prefill_ms(np.array([np.nan]), cfg)[0])


def test_recompute_cost_of_a_block_is_the_marginal_prefill_of_its_chain() -> None:
    cfg = FeatureConfig()
    tokens, kv, chain, block = meta_columns(np.array([1024.0]), np.array([1.0]), cfg)
    assert tokens[0] == 512 and kv[0] == 512 * 327_680
    assert chain[0] == prefill_ms(1024.0, cfg)
    assert block[0] == prefill_ms(1024.0, cfg) - prefill_ms(512.0, cfg)


def test_tenant_code_is_stable() -> None:
    assert tenant_code("acme") == tenant_code("acme") != tenant_code("other")


def test_whole_blocks_are_the_full_ones_of_a_request_one_rule_for_scalars_and_arrays() -> None:
    assert whole_blocks(2 * 512 + 1, 3, 512) == 2  # the third is partial
    assert whole_blocks(3 * 512, 3, 512) == 3
    assert whole_blocks(10 * 512, 3, 512) == 3  # more tokens than blocks: every block
    assert whole_blocks(0, 3, 512) == 2 and whole_blocks(0, 0, 512) == 0  # no count: not last
    tokens = np.arange(0, 5 * 512 + 3, 37)
    for n in range(6):
        blocks = np.full(len(tokens), n)
        want = [whole_blocks(int(t), n, 512) for t in tokens]
        assert whole_blocks_of(tokens, blocks, 512).tolist() == want
