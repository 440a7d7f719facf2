"""The feature spec: every feature's name, unit and position, declared once, with a version.

The spec travels with every dataset and trained model. Anything that loads a model compares its
spec with the running one and refuses a difference, naming the differing features
(:meth:`FeatureSpec.diff`). A few names depend on the config (one ``heat_*`` column per
half-life, one slope per queue window), so the spec is built from a :class:`FeatureConfig`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property

from kvcast.features.config import FeatureConfig

SPEC_VERSION = "1"


@dataclass(frozen=True, slots=True)
class FeatureDef:
    name: str
    unit: str
    family: str  # session | heat | queue | memory | meta
    doc: str


class SpecMismatch(ValueError):
    """A model or dataset was built with a different feature spec."""


@dataclass(frozen=True)
class FeatureSpec:
    version: str
    features: tuple[FeatureDef, ...]

    @cached_property
    def names(self) -> tuple[str, ...]:  # (read at every tick: made once)
        return tuple(f.name for f in self.features)

    def __len__(self) -> int:
        return len(self.features)

    def index(self, name: str) -> int:
        return self.names.index(name)

    @property
    def digest(self) -> str:
        """Hash of the version and of every (name, unit) in order."""
        payload = json.dumps([self.version, [(f.name, f.unit) for f in self.features]])
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def diff(self, other: FeatureSpec) -> list[str]:
        """One line per difference, each naming the feature; empty when the specs agree. A
        feature both have is said to move only when its order among the features both have
        changed, not when one before it was added or removed (that one is named)."""
        out = (
            [f"version: {self.version} != {other.version}"] if self.version != other.version else []
        )
        mine = {f.name: (i, f) for i, f in enumerate(self.features)}
        theirs = {f.name: (i, f) for i, f in enumerate(other.features)}
        rank_mine = {n: r for r, n in enumerate(n for n in mine if n in theirs)}
        rank_theirs = {n: r for r, n in enumerate(n for n in theirs if n in mine)}
        for name, (i, f) in mine.items():
            if name not in theirs:
                out.append(f"{name}: missing from the other spec")
                continue
            j, g = theirs[name]
            if f.unit != g.unit:
                out.append(f"{name}: unit {f.unit!r} != {g.unit!r}")
            if rank_mine[name] != rank_theirs[name]:
                out.append(f"{name}: position {i} != {j}")
        out += [f"{name}: only in the other spec" for name in theirs if name not in mine]
        return out

    def require_equal(self, other: FeatureSpec) -> None:
        """Raise :class:`SpecMismatch` naming every differing feature."""
        problems = self.diff(other)
        if problems:
            raise SpecMismatch("feature spec differs: " + "; ".join(problems))

    def to_json(self) -> str:
        feats = [[f.name, f.unit, f.family, f.doc] for f in self.features]
        return json.dumps({"version": self.version, "features": feats})

    @classmethod
    def from_json(cls, text: str) -> FeatureSpec:
        data = json.loads(text)
        return cls(str(data["version"]), tuple(FeatureDef(*f) for f in data["features"]))


def duration_tag(ms: float) -> str:
    """``5000.0 -> '5s'``, ``1500.0 -> '1500ms'``: the suffix of per-window feature names."""
    return f"{int(ms // 1000)}s" if ms % 1000 == 0 else f"{ms:g}ms"


def build_spec(cfg: FeatureConfig) -> FeatureSpec:
    """The ordered feature list the model sees for ``cfg``."""
    d = FeatureDef
    feats = [
        d("sess_since_last_ms", "ms", "session", "time since the owning session's last request"),
        d("sess_gap_ewma_ms", "ms", "session", "EWMA of the session's inter-arrival gaps"),
        d("sess_gap_std_ms", "ms", "session", "square root of the EW variance of the gaps"),
        d("sess_gap_z", "sigma", "session", "(since_last - EWMA) / std"),
        d("sess_turns", "requests", "session", "requests of the session so far"),
        d("sess_in_think_gap", "flag", "session", "since_last <= think_factor x EWMA"),
        d("sess_explicit", "flag", "session", "1: session id from the trace, 0: inferred"),
    ]
    feats += [
        d(f"heat_{duration_tag(h)}", "requests", "heat", f"requests decayed, half-life {h:g} ms")
        for h in cfg.heat_half_lives_ms
    ]
    feats += [
        d("depth", "blocks", "heat", "position of the block in its prefix chain (root = 0)"),
        d("fanout", "blocks", "heat", "distinct child blocks seen in the distinct window"),
        d("distinct_sessions", "sessions", "heat", "distinct sessions in the distinct window"),
        d("distinct_tenants", "tenants", "heat", "distinct tenants in the distinct window"),
        d("age_first_ms", "ms", "heat", "time since the first access (since state was kept)"),
        d("since_last_ms", "ms", "heat", "time since the last request containing the block"),
        d("node_queue_len", "requests", "queue", "home node: queued requests"),
        d("node_queued_prefill_tokens", "tokens", "queue", "home node: queued prefill tokens"),
        d("node_est_queue_ms", "ms", "queue", "home node: queue delay estimate"),
        d("node_transfers_in_flight", "transfers", "queue", "home node: KV transfers in flight"),
    ]
    for w in cfg.queue_windows_ms:
        feats.append(d(f"node_queue_slope_{duration_tag(w)}", "requests/s", "queue", "LSQ slope"))
    for w in cfg.queue_windows_ms:
        feats.append(d(f"node_prefill_slope_{duration_tag(w)}", "tokens/s", "queue", "LSQ slope"))
    feats += [
        d("telemetry_age_ms", "ms", "queue", "home node: time since its last telemetry sample"),
        d("node_used_frac", "fraction", "memory", "home node: used / capacity bytes"),
        d("node_cached_frac", "fraction", "memory", "home node: cached / capacity bytes"),
        d("node_spec_frac", "fraction", "memory", "home node: speculative / capacity bytes"),
        d("node_free_after_pending_frac", "fraction", "memory", "free after pending copies"),
        d("node_eviction_rate", "evictions/s", "memory", "home node: evictions per second"),
        d("block_tokens", "tokens", "meta", "tokens in the block (the last one may be partial)"),
        d("kv_bytes", "bytes", "meta", "KV bytes of the block"),
        d("recompute_chain_ms", "ms", "meta", "prefill ms of the chain up to this block"),
        d("recompute_block_ms", "ms", "meta", "marginal prefill ms of this block"),
        d("replicas_gpu", "nodes", "meta", "nodes holding the block in GPU memory"),
        d("replicas_lower", "nodes", "meta", "nodes holding it in CPU/disk/remote tiers"),
        d("replica_mask", "bitmask", "meta", "bit n set: node n (< 52) holds it in GPU"),
        d("home_holds", "flag", "meta", "the home node holds it in GPU memory"),
        d("tenant_code", "category", "meta", "crc32 of the tenant name"),
        d("is_public", "flag", "meta", "the block lies in a prefix marked public"),
    ]
    return FeatureSpec(SPEC_VERSION, tuple(feats))
