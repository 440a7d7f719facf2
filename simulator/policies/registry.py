"""Typed registry of routing policies, keyed by name.

A policy module registers its class with :func:`register_policy`; the simulator and the CLI
build one with :func:`create_policy`. Every policy class is constructed as
``cls(params, num_nodes=..., seed=...)`` and must be deterministic given the seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from kvcast.config import FrozenConfig
from kvcast.simulator.policies.base import RoutingPolicy

if TYPE_CHECKING:
    from kvcast.simulator.policies.config import RoutingConfig


class UnknownPolicyError(ValueError):
    """No routing policy is registered under this name; the message lists the valid ones."""

    def __init__(self, name: str, valid: list[str]) -> None:
        super().__init__(f"unknown routing policy {name!r}; valid policies: {', '.join(valid)}")
        self.name = name
        self.valid = valid


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """One registry entry: the policy class and the config class of its parameters."""

    name: str
    cls: type
    params_cls: type[FrozenConfig]

    def create(self, params: FrozenConfig, *, num_nodes: int, seed: int) -> RoutingPolicy:
        policy: RoutingPolicy = self.cls(params, num_nodes=num_nodes, seed=seed)
        return policy


_REGISTRY: dict[str, PolicySpec] = {}

T = TypeVar("T", bound=type)


def register_policy(name: str, params_cls: type[FrozenConfig]) -> Callable[[T], T]:
    """Class decorator: register a policy under ``name`` and set its ``name`` attribute."""

    def decorate(cls: T) -> T:
        existing = _REGISTRY.get(name)
        if existing is not None and _qualname(existing.cls) != _qualname(cls):
            raise ValueError(
                f"routing policy {name!r} is already registered by {_qualname(existing.cls)}"
            )
        cls.name = name  # type: ignore[attr-defined]
        _REGISTRY[name] = PolicySpec(name=name, cls=cls, params_cls=params_cls)
        return cls

    return decorate


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def policy_names() -> list[str]:
    """Names of all registered policies, sorted."""
    return sorted(_REGISTRY)


def policy_spec(name: str) -> PolicySpec:
    """The registry entry for ``name``; raises :class:`UnknownPolicyError`."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownPolicyError(name, policy_names()) from None


def create_policy(
    name: str, routing_cfg: RoutingConfig | None = None, *, num_nodes: int, seed: int
) -> RoutingPolicy:
    """Build the policy ``name`` for a cluster of ``num_nodes`` nodes.

    Its parameters are the field ``name`` of ``routing_cfg``, or the params class defaults
    when ``routing_cfg`` is None or has no such field (a policy registered outside this
    package, such as the predictive ones, may keep its parameters elsewhere).
    """
    spec = policy_spec(name)
    if num_nodes < 1:
        raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
    return spec.create(_params(spec, routing_cfg), num_nodes=num_nodes, seed=seed)


def _params(spec: PolicySpec, routing_cfg: RoutingConfig | None) -> FrozenConfig:
    """The policy's parameters: the field of its name in ``routing_cfg``, else its defaults."""
    params = getattr(routing_cfg, spec.name, None) if routing_cfg is not None else None
    if params is None:
        return spec.params_cls()
    if not isinstance(params, spec.params_cls):
        raise TypeError(
            f"routing config for {spec.name!r} is a {type(params).__name__}, "
            f"expected {spec.params_cls.__name__}"
        )
    return params


def prefix_view_of(name: str, routing_cfg: RoutingConfig | None = None) -> str | None:
    """The ``prefix_view`` of the policy ``name`` (a registered router) with its parameters
    from ``routing_cfg``; None for an unknown name or a router without one."""
    if name not in _REGISTRY:
        return None
    view = getattr(_params(_REGISTRY[name], routing_cfg), "prefix_view", None)
    return view if isinstance(view, str) else None


def policy_prefix_view(policy: object, routing_cfg: RoutingConfig | None = None) -> str | None:
    """The ``prefix_view`` of the router a policy object routes with: a plain router's own
    parameters (it may have been built with others than ``routing_cfg``'s), else the base
    router's of a replicating policy, from ``routing_cfg`` as :func:`prefix_view_of` reads
    it; None where that router has none."""
    base = getattr(policy, "base_router", None)
    if base is None:
        view = getattr(getattr(policy, "params", None), "prefix_view", None)
        if isinstance(view, str):
            return view
    return prefix_view_of(base if base is not None else getattr(policy, "name", ""), routing_cfg)
