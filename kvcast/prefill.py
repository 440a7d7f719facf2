"""The prefill-time model shared by the simulator, the features and the decider.

``a + b*n + c*n^2`` ms for n uncached tokens (DistServe's form). The defaults are calibrated
to Llama-3-70B on an 8 x H100 node: about 11-13k tokens/s at 2-8k tokens; ``c/b`` is about
1/(100k tokens), where attention costs as much as the linear layers.
"""

from __future__ import annotations

from pydantic import Field

from kvcast.config import FiniteConfig


class PrefillModel(FiniteConfig):
    """Prefill time ``a + b*n + c*n^2`` ms for n uncached tokens (finite: an infinite one
    never ends its iteration)."""

    a_ms: float = Field(20.0, ge=0)  # fixed per-iteration cost
    b_ms_per_token: float = Field(0.07, ge=0)  # linear (MLP / projection) cost
    c_ms_per_token2: float = Field(7e-7, ge=0)  # quadratic (attention) cost
    chunk_tokens: int = Field(8192, gt=0)  # chunked-prefill token budget per iteration

    def isolated_ms(self, n: int) -> float:
        """Time one request of n uncached tokens takes alone, in one pass."""
        return self.a_ms + self.b_ms_per_token * n + self.c_ms_per_token2 * n * n
