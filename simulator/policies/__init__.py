"""Routing policies: one anchor rule per module, behind a typed registry.

Importing this package registers every built-in policy.
"""

from kvcast.simulator.policies import (  # noqa: F401  (imported to register the policies)
    aibrix_prefix,
    dynamo_kv,
    least_loaded,
    llmd_precise,
    mooncake_conductor,
    prefix_sticky,
    round_robin,
    sglang_cache_aware,
)
from kvcast.simulator.policies.base import (
    NodeLoad,
    NodeSnapshot,
    RoutingContext,
    RoutingDecision,
    RoutingPolicy,
)
from kvcast.simulator.policies.config import RoutingConfig
from kvcast.simulator.policies.registry import (
    PolicySpec,
    UnknownPolicyError,
    create_policy,
    policy_names,
    policy_spec,
    register_policy,
)

__all__ = [
    "NodeLoad",
    "NodeSnapshot",
    "PolicySpec",
    "RoutingConfig",
    "RoutingContext",
    "RoutingDecision",
    "RoutingPolicy",
    "UnknownPolicyError",
    "create_policy",
    "policy_names",
    "policy_spec",
    "register_policy",
]
