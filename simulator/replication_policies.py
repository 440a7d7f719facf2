"""The policies that act ahead of arrivals, by name, beside the anchors' routers.

Importing this module registers them in the routing registry
(:mod:`kvcast.simulator.policies.registry`), so that ``kvcast policies`` lists them and a
simulator built by name runs them:

- ``oracle``: the decider fed with the future arrivals (:mod:`kvcast.simulator.oracle`);
- ``predictive_recency``: the decider fed by the recency scorer
  (:mod:`kvcast.simulator.recency_scorer`).

Each is the base router named in the decider config (``loop.router``, default ``dynamo_kv``)
plus a replicator on its own tick. The learned scorers (``predictive_rule``,
``predictive_lgbm``, ``predictive_tcn``) will register here once their ONNX scorers exist.
:func:`make_policy` builds any policy, router or replicating, with a given decider config.
"""

from __future__ import annotations

from kvcast.predictor.decider_config import DeciderConfig
from kvcast.simulator import oracle, recency_scorer  # noqa: F401  (registers the policies)
from kvcast.simulator.config import SimConfig
from kvcast.simulator.policies.base import RoutingPolicy
from kvcast.simulator.policies.registry import create_policy, policy_names, policy_spec
from kvcast.simulator.replicating_policy import ReplicatingPolicy


def is_replicating(name: str) -> bool:
    """Whether the registered policy ``name`` acts ahead of arrivals."""
    return issubclass(policy_spec(name).cls, ReplicatingPolicy)


def replicating_policy_names() -> list[str]:
    return [name for name in policy_names() if is_replicating(name)]


def make_policy(name: str, cfg: SimConfig, decider: DeciderConfig | None = None) -> RoutingPolicy:
    """A fresh policy for one run: an anchor router with ``cfg.routing``'s parameters, or a
    replicating policy with ``decider`` (default: the embedded decider config) whose base
    router takes ``cfg.routing``'s parameters when the run starts. Unknown names raise
    :class:`~kvcast.simulator.policies.registry.UnknownPolicyError`."""
    if not is_replicating(name):
        return create_policy(name, cfg.routing, num_nodes=cfg.nodes, seed=cfg.seed)
    policy: RoutingPolicy = policy_spec(name).create(
        decider if decider is not None else DeciderConfig(), num_nodes=cfg.nodes, seed=cfg.seed
    )
    return policy
