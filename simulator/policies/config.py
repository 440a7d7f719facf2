"""``routing:`` configuration: one field per built-in policy, holding its parameters.

``routing: {dynamo_kv: {prefill_load_scale: 1.0}}`` validates; an unknown policy or
parameter name is rejected. Defaults are the anchors' own (see each policy module).
"""

from __future__ import annotations

from kvcast.config import FrozenConfig
from kvcast.simulator.policies.aibrix_prefix import AibrixPrefixParams
from kvcast.simulator.policies.dynamo_kv import DynamoKvParams
from kvcast.simulator.policies.least_loaded import LeastLoadedParams
from kvcast.simulator.policies.llmd_precise import LlmdPreciseParams
from kvcast.simulator.policies.mooncake_conductor import MooncakeConductorParams
from kvcast.simulator.policies.prefix_sticky import PrefixStickyParams
from kvcast.simulator.policies.round_robin import RoundRobinParams
from kvcast.simulator.policies.sglang_cache_aware import SglangCacheAwareParams


class RoutingConfig(FrozenConfig):
    # Textbook rotation; no parameters.
    round_robin: RoundRobinParams = RoundRobinParams()
    # Fewest outstanding requests; no parameters.
    least_loaded: LeastLoadedParams = LeastLoadedParams()
    # Consistent hash of the session / first blocks.
    prefix_sticky: PrefixStickyParams = PrefixStickyParams()
    # SGLang router cache_aware thresholds.
    sglang_cache_aware: SglangCacheAwareParams = SglangCacheAwareParams()
    # NVIDIA Dynamo KV router cost weights.
    dynamo_kv: DynamoKvParams = DynamoKvParams()
    # llm-d precise prefix-cache scheduling weights.
    llmd_precise: LlmdPreciseParams = LlmdPreciseParams()
    # AIBrix prefix-cache router thresholds.
    aibrix_prefix: AibrixPrefixParams = AibrixPrefixParams()
    # Mooncake Conductor balancing threshold and early rejection.
    mooncake_conductor: MooncakeConductorParams = MooncakeConductorParams()
