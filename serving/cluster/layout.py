"""The addresses of a running local cluster, as ``kvcast cluster up`` writes them.

``cluster up`` writes ``<workdir>/cluster.json`` once every process is ready, and removes it
when they have stopped; ``kvcast cluster replay --cluster DIR`` reads it. It holds addresses,
process ids and the *names* of the environment variables of the shared token and of the
ingest token (when the cluster has one), never a token itself; with
``cluster up --tls``, the paths of the cluster CA and of the replay client's certificate and
key (:class:`TlsPaths`; the sidecar and the agents then speak ``https://`` only and require a
certificate).
Its ``mode`` and ``model`` are those the sidecar was started with, written once: a
``POST /v1/mode`` or ``POST /v1/model`` at run time does not change them (the sidecar's
``GET /v1/mode`` and ``GET /v1/model`` say what it runs now).
Every address is checked to be a loopback one on both sides. :class:`ReplayTargets` is what
``kvcast cluster replay`` plays against: these addresses (or those given on its command line),
the tokens and the client certificate.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kvcast.serving.cluster.ports import require_loopback
from kvcast.serving.http.token_env import NOT_A_NAME, is_env_name
from kvcast.serving.http.token_text import token_problem
from kvcast.serving.tls import TlsFiles

CLUSTER_FILE = "cluster.json"


@dataclass(frozen=True, slots=True)
class NodeAddresses:
    """One GPU node of the local cluster."""

    name: str
    agent: str  # the agent's HTTP control API, http://127.0.0.1:P (https:// with TLS)
    transfer: str  # the agent's transfer server, 127.0.0.1:P (peers pull from it)
    engine: str | None = None  # the engine's vLLM KV-event PUB endpoint (the engine binds it)
    replay: str | None = None  # the engine's replay ROUTER endpoint

    def __post_init__(self) -> None:
        require_loopback(self.agent, f"node {self.name}: agent")
        require_loopback(self.transfer, f"node {self.name}: transfer")
        for what, value in (("engine", self.engine), ("replay", self.replay)):
            if value is not None:
                require_loopback(value, f"node {self.name}: {what}")


@dataclass(frozen=True, slots=True)
class TlsPaths:
    """Mutual TLS in a cluster: its CA, and the certificate and key a client (the replay)
    presents to the agents; PEM file paths."""

    ca: str
    cert: str
    key: str

    @classmethod
    def of(cls, files: TlsFiles) -> TlsPaths:
        return cls(str(files.ca), str(files.cert), str(files.key))

    def files(self) -> TlsFiles:
        return TlsFiles(cert=Path(self.cert), key=Path(self.key), ca=Path(self.ca))


@dataclass(frozen=True, slots=True)
class ClusterLayout:
    """Where everything listens; ``nodes`` in the sidecar's node order (position = node id)."""

    sidecar: str  # the sidecar's HTTP API, http://127.0.0.1:P (https:// with TLS)
    nodes: tuple[NodeAddresses, ...]
    mode: str = "shadow"  # the mode the sidecar was started in (GET /v1/mode: the current one)
    model: str = ""  # the model it was started with (GET /v1/model: the one loaded now)
    block_bytes: int = 64 << 10  # KV bytes of one block, as the sidecar prices them
    token_env: str | None = None  # the environment variable holding the token (None: no auth)
    # the one holding the ingest token (None: none; the router and the engines use the token)
    ingest_token_env: str | None = None
    workdir: str = ""
    pids: dict[str, int] = field(default_factory=dict)  # service name -> process id
    tls: TlsPaths | None = None  # mutual TLS to sidecar and agents (None: plain HTTP, token only)

    def __post_init__(self) -> None:
        require_loopback(self.sidecar, "sidecar")
        if not self.nodes:
            raise ValueError("a cluster has at least one node")
        for key in ("token_env", "ingest_token_env"):
            name = getattr(self, key)
            if name is not None and not is_env_name(name):  # (never shown: it may be a token)
                raise ValueError(f"{key} {NOT_A_NAME}")

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if self.tls is None:
            del data["tls"]  # a plain cluster's file is as it always was
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterLayout:
        try:
            _strings(data, ("sidecar", "mode", "model", "workdir"), "")
            for i, n in enumerate(data["nodes"]):
                _strings(n, ("name", "agent", "transfer", "engine", "replay"), f"nodes[{i}].")
            if isinstance(data.get("tls"), dict):
                _strings(data["tls"], ("ca", "cert", "key"), "tls.")
            pids, size = data.get("pids", {}), data.get("block_bytes", 1)
            if not isinstance(pids, dict) or not all(_whole(v) for v in pids.values()):
                raise TypeError("pids must map each service to its process id")
            if not _whole(size):
                raise TypeError("block_bytes must be a whole number above 0")
            nodes = tuple(NodeAddresses(**n) for n in data["nodes"])
            tls = None if data.get("tls") is None else TlsPaths(**data["tls"])
            rest = {k: v for k, v in data.items() if k not in ("nodes", "tls")}
            return cls(nodes=nodes, tls=tls, **rest)
        except (KeyError, TypeError) as err:
            raise ValueError(f"not a kvcast cluster description: {err}") from None

    def write(self, workdir: Path) -> Path:
        """Write ``workdir/cluster.json`` atomically (a reader never sees half of it)."""
        path = workdir / CLUSTER_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        tmp.replace(path)
        return path


def _whole(value: Any) -> bool:
    """A whole number above 0 (not a boolean)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _strings(data: Any, keys: tuple[str, ...], where: str) -> None:
    """A TypeError naming the first of ``keys`` in ``data`` (a mapping) that is set but not a
    string (a hand-edited cluster.json)."""
    if not isinstance(data, dict):
        raise TypeError(f"{where.rstrip('.') or 'the file'} is not a mapping")
    for key in keys:
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{where}{key} must be a string, got {type(value).__name__}")


def read_layout(workdir: str | Path) -> ClusterLayout:
    """The layout ``kvcast cluster up`` wrote into ``workdir`` (a ValueError if none)."""
    path = Path(workdir) / CLUSTER_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file; is `kvcast cluster up` running there?") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err.msg})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    try:
        return ClusterLayout.from_json(data)
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None


@dataclass(frozen=True)
class ReplayTargets:
    """The cluster to play against; ``engines``: (PUB, replay) endpoint per node, or None to
    post the KV events to the sidecar over HTTP; ``token``: the shared token (storing and
    evicting block bytes in the agents); ``ingest_token``: the token of the reports (arrivals,
    KV events, engine stats; None: ``token``'s); ``tls``: the client certificate presented to
    an ``https://`` sidecar and agents (and the CA their certificates are verified against;
    without it, an ``https://`` sidecar is verified against the default trust store)."""

    sidecar: str
    agents: tuple[str, ...]
    names: tuple[str, ...]
    engines: tuple[tuple[str, str | None], ...] | None = None
    token: str | None = field(default=None, repr=False)
    tls: TlsFiles | None = None
    ingest_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalise once, here
        set_(self, "sidecar", require_loopback(self.sidecar, "--sidecar"))
        set_(self, "agents", tuple(require_loopback(a, "--agents") for a in self.agents))
        if not self.agents or len(self.names) != len(self.agents):
            raise ValueError("one name per agent, at least one agent")
        if self.tls is None and any(a.startswith("https://") for a in self.agents):
            raise ValueError("https:// agents require a client certificate: set KVCAST_TLS_CERT, "
                             "KVCAST_TLS_KEY and KVCAST_TLS_CA, or give --cluster DIR")  # fmt: skip
        if self.engines is not None:
            if len(self.engines) != len(self.agents):
                raise ValueError("one engine endpoint per agent")
            for pub, replay in self.engines:
                for e in (pub, replay):
                    if e is not None:
                        require_loopback(e, "--engines")
        for name, token in (("the token", self.token), ("the ingest token", self.ingest_token)):
            if token is not None and (problem := token_problem(token)) is not None:
                raise ValueError(f"{name} {problem}")

    @classmethod
    def from_layout(
        cls, layout: ClusterLayout, token: str | None, ingest_token: str | None = None
    ) -> ReplayTargets:
        engines = [(n.engine, n.replay) for n in layout.nodes]
        return cls(
            layout.sidecar, tuple(n.agent for n in layout.nodes), layout.node_names,
            None if any(e is None for e, _ in engines) else tuple(engines),  # type: ignore[arg-type]
            token, None if layout.tls is None else layout.tls.files(), ingest_token,
        )  # fmt: skip

    def headers(self, reports: bool = False) -> dict[str, str]:
        """The ``Authorization`` header of a call: a report's (``reports``: an arrival, KV
        events, engine stats) carries the ingest token when there is one, any other call the
        shared token; none without a token."""
        token = (self.ingest_token or self.token) if reports else self.token
        return {"Authorization": f"Bearer {token}"} if token else {}
