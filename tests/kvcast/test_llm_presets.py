import pytest

from kvcast.llm import LLM_PRESETS, get_llm


def test_kv_bytes_per_token_equal_published_llama3_figures() -> None:
    assert get_llm("llama-3-70b").kv_bytes_per_token("fp16") == 327_680
    assert get_llm("llama-3-8b").kv_bytes_per_token("fp16") == 131_072


def test_fp8_kv_halves_the_bytes_and_bf16_equals_fp16() -> None:
    for spec in LLM_PRESETS.values():
        assert spec.kv_bytes_per_token("fp8") * 2 == spec.kv_bytes_per_token("fp16")
        assert spec.kv_bytes_per_token("bf16") == spec.kv_bytes_per_token("fp16")


def test_70b_block_of_512_tokens_is_160_mib() -> None:
    assert get_llm("llama-3-70b").kv_bytes_per_block(512) == 160 * 2**20


def test_unknown_preset_error_lists_valid_names() -> None:
    with pytest.raises(ValueError, match="llama-3-8b"):
        get_llm("gpt-5")
