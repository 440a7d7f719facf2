"""The policies that act ahead of arrivals, by name, beside the anchors' routers.

Importing this module registers them in the routing registry
(:mod:`kvcast.simulator.policies.registry`), so that ``kvcast policies`` lists them and a
simulator built by name runs them:

- ``oracle``: the decider fed with the future arrivals (:mod:`kvcast.simulator.oracle`);
- ``predictive_recency``: the decider fed by the recency scorer
  (:mod:`kvcast.simulator.recency_scorer`);
- ``predictive_rule`` / ``predictive_lgbm`` / ``predictive_tcn``: the decider fed by an ONNX
  model over the sidecar's feature state (:mod:`kvcast.simulator.model_scorer`).

Each is the base router named in the decider config (``loop.router``, default ``dynamo_kv``)
plus a replicator on its own tick. :func:`make_policy` builds any policy, router or
replicating, with a given decider config and, for the model policies, a model per kind.
"""

from __future__ import annotations

from collections.abc import Mapping

from kvcast.predictor.decider_config import DeciderConfig
from kvcast.simulator import oracle, recency_scorer  # noqa: F401  (registers the policies)
from kvcast.simulator.config import SimConfig
from kvcast.simulator.model_scorer import ModelPolicy
from kvcast.simulator.policies.base import RoutingPolicy
from kvcast.simulator.policies.registry import create_policy, policy_names, policy_spec
from kvcast.simulator.replicating_policy import ReplicatingPolicy


def is_replicating(name: str) -> bool:
    """Whether the registered policy ``name`` acts ahead of arrivals."""
    return issubclass(policy_spec(name).cls, ReplicatingPolicy)


def replicating_policy_names() -> list[str]:
    return [name for name in policy_names() if is_replicating(name)]


def make_policy(
    name: str,
    cfg: SimConfig,
    decider: DeciderConfig | None = None,
    models: Mapping[str, str] | None = None,
) -> RoutingPolicy:
    """A fresh policy for one run: an anchor router with ``cfg.routing``'s parameters, or a
    replicating policy with ``decider`` (default: the embedded decider config) whose base
    router takes ``cfg.routing``'s parameters when the run starts. A model policy
    (``predictive_lgbm``, ...) scores with ``models[kind]`` (an ONNX path or MLflow URI;
    default: the kind's champion in the local MLflow store). Unknown names raise
    :class:`~kvcast.simulator.policies.registry.UnknownPolicyError`."""
    if not is_replicating(name):
        return create_policy(name, cfg.routing, num_nodes=cfg.nodes, seed=cfg.seed)
    spec = policy_spec(name)
    params = decider if decider is not None else DeciderConfig()
    if issubclass(spec.cls, ModelPolicy):
        model = (models or {}).get(spec.cls.kind)
        policy: RoutingPolicy = spec.cls(params, num_nodes=cfg.nodes, seed=cfg.seed, model=model)
        return policy
    return spec.create(params, num_nodes=cfg.nodes, seed=cfg.seed)
