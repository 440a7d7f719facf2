"""Configuration of the router sidecar (``kvcast serve sidecar``), frozen and validated.

``configs/serving/sidecar.yaml`` documents every key. Nodes are listed once, in order: a
node's position is its id in the feature state and the decider (0..n-1), its ``name`` is what
logs, metrics and the HTTP API show (``POST /v1/requests`` accepts either).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, model_validator

from kvcast.config import FiniteConfig, load_config, with_overrides
from kvcast.features.config import FeatureConfig
from kvcast.llm import get_llm
from kvcast.predictor.decider_config import DeciderConfig
from kvcast.serving.agent.sizes import ByteSize
from kvcast.serving.agent.transport import parse_peer
from kvcast.serving.gc_pacing import GcConfig
from kvcast.serving.http.auth import Token
from kvcast.serving.http.ingest_token import check_ingest_token
from kvcast.serving.http.server_config import HttpServerConfig, ServerTlsConfig
from kvcast.serving.sidecar.tenant_tokens import TenantTokenConfig

Mode = Literal["shadow", "active"]
Name = str


class NodeConfig(FiniteConfig):
    """One GPU node: its engine's KV-event sockets and its transfer agent."""

    name: Name = Field(min_length=1, max_length=128, pattern=r"^[\x21-\x7e]+$")
    agent: str | None = None  # agent control API base URL (None: never a source or target)
    engine: str | None = None  # vLLM KV-event PUB endpoint (None: the engine posts events)
    replay: str | None = None  # vLLM replay ROUTER endpoint (None: gaps are counted only)
    topic: str = ""  # ZMQ topic filter ("" takes every topic)
    # tenants this node serves (None: any; an empty list would serve none: refused)
    tenants: tuple[Annotated[str, Field(min_length=1)], ...] | None = Field(None, min_length=1)


class LinkPair(FiniteConfig):
    """Overrides for the link between two named nodes (both directions)."""

    a: Name
    b: Name
    gbps: float | None = Field(None, gt=0)
    latency_ms: float | None = Field(None, ge=0)
    tier: int | None = Field(None, ge=0, le=3)


class LinksConfig(FiniteConfig):
    """The network between nodes; the decider prices transfers with it."""

    gbps: float = Field(100.0, gt=0)  # line rate of the default link
    efficiency: float = Field(0.87, gt=0, le=1)  # achieved share of the line rate
    latency_ms: float = Field(0.01, ge=0)
    tier: int = Field(2, ge=0, le=3)  # 0 same host, 1 rack, 2 datacenter, 3 cross zone
    pairs: tuple[LinkPair, ...] = ()


class AgentClientConfig(FiniteConfig):
    """How the sidecar talks to the agents."""

    telemetry_period_s: float = Field(1.0, gt=0)  # GET /v1/telemetry of every agent
    timeout_s: float = Field(5.0, gt=0)  # per HTTP call, replicate excepted
    replicate_deadline_s: float = Field(10.0, gt=0)  # most a pull may take
    min_deadline_s: float = Field(1.0, gt=0)  # least, even when the first use is nearer
    max_in_flight: int = Field(64, ge=1)  # commands sent and not yet answered
    retry_elsewhere: bool = True  # a failed replication is retried once from another holder
    # active mode: the replicas a routed request counts are held on its node's agent until
    # its engine stores those blocks (a BlockStored), or for this long at most
    claim_hold_s: float = Field(30.0, gt=0, le=3600)

    @model_validator(mode="after")
    def _consistent(self) -> AgentClientConfig:
        if self.min_deadline_s > self.replicate_deadline_s:  # the cap silently won
            raise ValueError(f"min_deadline_s ({self.min_deadline_s}) must not exceed "
                             f"replicate_deadline_s ({self.replicate_deadline_s})")  # fmt: skip
        return self


class DecisionLogConfig(FiniteConfig):
    """The Parquet decision log (columns in :mod:`kvcast.serving.sidecar.decision_log`)."""

    path: str | None = "kvcast-out/sidecar/decisions.parquet"  # None: no log
    rows_per_chunk: int = Field(1024, ge=1)  # a row group is written at this many rows
    flush_s: float = Field(5.0, gt=0)  # or when the oldest unwritten row is this old
    # A part is closed (footer written: readable) at this many rows, or once this old; a
    # killed sidecar loses its open part's rows at most. Defaults: decision_log.ROTATE_*.
    rotate_rows: int = Field(100_000, ge=1)
    rotate_s: float = Field(60.0, gt=0)


class SidecarConfig(FiniteConfig):
    # a validation error's text never shows a value (it may be a token's)
    model_config = ConfigDict(hide_input_in_errors=True)

    sidecar_id: Name = Field("sidecar-0", min_length=1, max_length=64, pattern=r"^[\x21-\x7e]+$")
    listen: str = "127.0.0.1:8480"  # HTTP API, HOST:PORT (port 0: any free port, logged)
    http: HttpServerConfig = HttpServerConfig()  # bounds on slow or too many API clients
    tls: ServerTlsConfig | None = None  # TLS on the API (None: plain HTTP, for loopback)
    mode: Mode = "shadow"  # shadow: decide and log; active: also command the agents
    model: str | None = None  # ONNX path or models:/name@alias (None: load via POST /v1/model)
    features: str | None = None  # feature YAML (None: built-in defaults); nodes set from here
    decider: str | None = None  # decider YAML (None: built-in defaults)
    block_bytes: ByteSize | None = Field(None, gt=0)  # KV bytes of a block (None: derived)
    nodes: tuple[NodeConfig, ...] = Field(min_length=1)
    links: LinksConfig = LinksConfig()
    tick_ms: float = Field(250.0, ge=1.0)  # decision tick period (under 1 ms: a busy spin)
    queue_events: int = Field(200_000, ge=1)  # bound of the ingestion queue, in events
    max_tracked_blocks: int | None = Field(2_000_000, ge=1)  # feature-state cap (None: horizon)
    max_tracked_sessions: int | None = Field(1_000_000, ge=1)  # likewise, sessions
    recent_decisions: int = Field(1000, ge=1)  # kept for GET /v1/decisions
    reactive_pull: bool = False  # the router pulls missing KV itself (Mooncake-style)
    zmq_hwm: int = Field(100_000, ge=1)
    replay_timeout_ms: int = Field(500, ge=1)
    agents: AgentClientConfig = AgentClientConfig()
    decision_log: DecisionLogConfig = DecisionLogConfig()
    shutdown_grace_s: float = Field(5.0, gt=0)
    gc: GcConfig = GcConfig()
    token: Token | None = None  # shared token (the CLI reads KVCAST_TOKEN)
    # the router's and the engines' token: POST /v1/requests and /v1/kv-events only (the CLI
    # reads KVCAST_INGEST_TOKEN); it needs the shared token and differs from it
    ingest_token: Token | None = None
    # tokens speaking for some tenants only; their secrets are read from the environment at
    # start-up (read_tenant_tokens, by the CLI), never by validating this config
    tenant_tokens: tuple[TenantTokenConfig, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> SidecarConfig:
        parse_peer(self.listen, allow_port_zero=True, key="listen")
        check_ingest_token(self.ingest_token_value, self.token_value, (), "ingest_token", "token")
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError(f"node names must be unique, got {names}")
        pairs: set[frozenset[str]] = set()
        for pair in self.links.pairs:
            for end in (pair.a, pair.b):
                if end not in names:
                    raise ValueError(f"links.pairs: unknown node {end!r}; nodes: {names}")
            key = frozenset((pair.a, pair.b))
            if pair.a == pair.b or key in pairs:  # the last one silently won, field by field
                what = "a node to itself" if pair.a == pair.b else "a pair named twice"
                raise ValueError(f"links.pairs: {pair.a}-{pair.b} is {what}")
            pairs.add(key)
        seen: dict[str, str] = {}  # an agent URL or engine endpoint -> the node that has it
        for node in self.nodes:
            if node.replay is not None and node.engine is None:
                raise ValueError(f"node {node.name!r}: replay needs engine")
            if node.agent is not None:
                check_agent_url(node.agent, f"node {node.name!r}: agent")
            for what, end in (("engine", node.engine), ("replay", node.replay)):
                if end is not None:
                    check_zmq_endpoint(end, f"node {node.name!r}: {what}")
            if node.tenants is not None and len(set(node.tenants)) != len(node.tenants):
                raise ValueError(f"node {node.name!r}: tenants named twice: {node.tenants}")
            ends = [("agent", node.agent.rstrip("/").lower())] if node.agent else []
            ends += [(k, v) for k, v in (("engine", node.engine), ("replay", node.replay)) if v]
            for what, end in ends:
                if (other := seen.setdefault(end, node.name)) != node.name:
                    raise ValueError(f"nodes {other!r} and {node.name!r} share {what} {end!r}: "
                                     "each node has its own")  # fmt: skip
        return self

    @property
    def token_value(self) -> str | None:
        return self.token.get_secret_value() if self.token else None

    @property
    def ingest_token_value(self) -> str | None:
        return self.ingest_token.get_secret_value() if self.ingest_token else None

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)

    @cached_property
    def feature_config(self) -> FeatureConfig:
        """The feature config file (or defaults) with ``nodes`` set to this cluster's."""
        base = (
            FeatureConfig() if self.features is None else load_config(FeatureConfig, self.features)
        )
        return with_overrides(base, nodes=len(self.nodes))

    @cached_property
    def decider_config(self) -> DeciderConfig:
        return DeciderConfig() if self.decider is None else load_config(DeciderConfig, self.decider)

    @property
    def kv_block_bytes(self) -> int:
        """KV bytes of one block: ``block_bytes``, else the feature model's per-block size."""
        if self.block_bytes is not None:
            return self.block_bytes
        f = self.feature_config
        return get_llm(f.model).kv_bytes_per_block(f.block_tokens, f.kv_dtype)


def check_agent_url(url: str, what: str) -> None:
    """``http(s)://HOST:PORT`` with an optional trailing ``/``; else a ValueError naming
    ``what`` (and the URL, unless it may carry credentials)."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{what} must be an http(s):// URL, got {url!r}")
    netloc = url.split("://", 1)[1].split("/", 1)[0]
    if "@" in netloc:  # user:password@: never echoed
        raise ValueError(f"{what}: an agent URL must not carry credentials")
    try:
        parts = urlsplit(url)
        parse_peer(netloc)  # port present, 1..65535; a bare host, no whitespace
    except ValueError:
        raise ValueError(f"{what} must be http(s)://HOST:PORT, got {url!r}") from None
    if parts.path not in ("", "/") or parts.query or parts.fragment or "?" in url or "#" in url:
        raise ValueError(f"{what} must be http(s)://HOST:PORT with no path, got {url!r}")


def check_zmq_endpoint(endpoint: str, what: str) -> None:
    """A ZMQ endpoint to connect to: ``tcp://HOST:PORT`` (port 1..65535), ``ipc://PATH`` or
    ``inproc://NAME``; else a ValueError naming ``what`` and the endpoint. libzmq accepts some
    that can never connect (``tcp://:5``, ``tcp://h:70000``); OS limits (an ipc path too long
    for a socket address) are left to the connect."""
    scheme, sep, rest = endpoint.partition("://")
    if scheme == "tcp" and sep:
        try:
            parse_peer(rest)
        except ValueError:
            raise ValueError(f"{what} must be tcp://HOST:PORT, got {endpoint!r}") from None
    elif scheme in ("ipc", "inproc") and sep:
        if not rest or not rest.isprintable() or rest != rest.strip():
            raise ValueError(f"{what}: {scheme}:// needs a name, got {endpoint!r}")
    else:
        raise ValueError(f"{what} must be a tcp://, ipc:// or inproc:// endpoint, got {endpoint!r}")


def load_sidecar_config(path: str | Path) -> SidecarConfig:
    return load_config(SidecarConfig, path)
