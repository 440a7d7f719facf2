"""LLM shapes that decide KV-cache sizes: layers, KV heads (GQA), head dim, weight bytes.

KV bytes per token = 2 (K and V) x layers x kv_heads x head_dim x bytes per element. The real
``kv_heads`` of grouped-query attention is used, never the hidden size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

KvDtype = Literal["fp16", "bf16", "fp8"]

DTYPE_BYTES: dict[str, int] = {"fp16": 2, "bf16": 2, "fp8": 1}


@dataclass(frozen=True, slots=True)
class LLMSpec:
    """Architecture facts of one model (from its published config.json)."""

    name: str
    layers: int
    kv_heads: int
    head_dim: int
    params_b: float  # parameters, billions (for weight memory)

    def kv_bytes_per_token(self, kv_dtype: KvDtype = "fp16") -> int:
        if kv_dtype not in DTYPE_BYTES:
            valid = ", ".join(sorted(DTYPE_BYTES))
            raise ValueError(f"unknown kv_dtype {kv_dtype!r}; valid: {valid}")
        return 2 * self.layers * self.kv_heads * self.head_dim * DTYPE_BYTES[kv_dtype]

    def kv_bytes_per_block(self, block_tokens: int, kv_dtype: KvDtype = "fp16") -> int:
        return self.kv_bytes_per_token(kv_dtype) * block_tokens

    def weight_bytes(self, weight_dtype: KvDtype = "bf16") -> int:
        return int(self.params_b * 1e9 * DTYPE_BYTES[weight_dtype])


LLM_PRESETS: dict[str, LLMSpec] = {
    # meta-llama/Meta-Llama-3-8B: 32 layers, 8 KV heads, head_dim 128.
    "llama-3-8b": LLMSpec("llama-3-8b", layers=32, kv_heads=8, head_dim=128, params_b=8.03),
    # meta-llama/Meta-Llama-3-70B: 80 layers, 8 KV heads, head_dim 128.
    "llama-3-70b": LLMSpec("llama-3-70b", layers=80, kv_heads=8, head_dim=128, params_b=70.6),
}


def get_llm(name: str) -> LLMSpec:
    try:
        return LLM_PRESETS[name]
    except KeyError:
        valid = ", ".join(sorted(LLM_PRESETS))
        raise ValueError(f"unknown model preset {name!r}; valid: {valid}") from None
