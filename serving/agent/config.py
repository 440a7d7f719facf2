"""Configuration of one KV transfer agent (``kvcast serve agent``)."""

from __future__ import annotations

from pydantic import ConfigDict, Field, model_validator

from kvcast.config import FiniteConfig
from kvcast.serving.agent.sizes import ByteSize
from kvcast.serving.agent.tcp_server import MAX_CONNECTIONS, MAX_HELLOS
from kvcast.serving.agent.tenant_pulls import DEFAULT_TENANT_PULLS
from kvcast.serving.agent.transport import binds_overlap, parse_peer
from kvcast.serving.gc_pacing import GcConfig
from kvcast.serving.http.auth import Token
from kvcast.serving.http.ingest_token import check_ingest_token
from kvcast.serving.http.server_config import HttpServerConfig
from kvcast.serving.http.tenant_tokens import TenantToken, burst_needs_rate, burst_of
from kvcast.serving.tls import HANDSHAKE_TIMEOUT_S

MAX_TOKEN_BYTES = 2048  # a token and a node id fit in a transfer Hello (MAX_HELLO_BODY)


def check_hello_fits(token: str, name: str) -> None:
    """A ValueError naming ``name`` (the variable the shared token came from) when ``token`` is
    over ``MAX_TOKEN_BYTES`` in UTF-8: no transfer Hello could carry it."""
    if (n := len(token.encode())) > MAX_TOKEN_BYTES:
        raise ValueError(f"{name} is {n} bytes, over the {MAX_TOKEN_BYTES} an agent's transfer "
                         "Hello carries")  # fmt: skip


class AgentTenantToken(TenantToken):
    """A tenant token of an agent; ``max_bytes``: the most bytes its tenants' blocks may take
    on this agent for an upload of this token to be stored (None: no cap beyond the
    capacity); ``max_pulls``: the pulls it is served at once over the transfer protocol;
    ``max_requests_per_s``: the HTTP requests per second it may make on average (None:
    unlimited), in bursts of up to ``burst_requests`` (None: 2 s worth)."""

    max_bytes: ByteSize | None = Field(None, gt=0)
    max_pulls: int = Field(DEFAULT_TENANT_PULLS, ge=1)
    # at least one request in 1,000 s: a Retry-After stays a number of seconds
    max_requests_per_s: float | None = Field(None, ge=1e-3, le=1e9)
    burst_requests: int | None = Field(None, ge=1, le=10**12)

    @model_validator(mode="after")
    def _burst_has_rate(self) -> AgentTenantToken:
        burst_needs_rate(
            self.max_requests_per_s, self.burst_requests, "max_requests_per_s", "burst_requests"
        )
        return self

    @property
    def burst(self) -> int | None:
        """The most requests at once (None: unlimited): ``burst_requests``, else
        ``BURST_SECONDS`` of requests at ``max_requests_per_s``, at least one."""
        return burst_of(self.max_requests_per_s, self.burst_requests)


class AgentConfig(FiniteConfig):
    """Sizes in bytes, times in seconds. ``token``: the shared secret that peers' pulls must
    carry (None: no authentication; the CLI reads it from ``KVCAST_TOKEN``); at most
    ``MAX_TOKEN_BYTES`` bytes in UTF-8. ``ingest_token``: the engines' token, which may only
    report their queue depths (``KVCAST_INGEST_TOKEN``; see
    :mod:`~kvcast.serving.http.ingest_token`)."""

    # a validation error's text never shows a value (it may be a token's)
    model_config = ConfigDict(hide_input_in_errors=True)

    node_id: str = Field("agent-0", min_length=1, max_length=128)
    listen: str = "127.0.0.1:0"  # the HTTP control API (port 0: ephemeral, logged)
    transfer_listen: str = "127.0.0.1:0"  # the TCP server that peers pull blocks from
    capacity_bytes: ByteSize = Field(gt=0)
    speculative_quota_bytes: ByteSize = Field(ge=0)
    speculative_ttl_s: float = Field(30.0, gt=0)
    link_bytes_per_s: float | None = Field(None, gt=0)
    link_burst_bytes: ByteSize = Field(4 << 20, gt=0)
    max_block_bytes: ByteSize = Field(256 << 20, gt=0)
    max_retries: int = Field(3, ge=0)
    backoff_base_s: float = Field(0.05, gt=0)
    backoff_max_s: float = Field(1.0, gt=0)
    connect_timeout_s: float = Field(5.0, gt=0)
    request_timeout_s: float = Field(10.0, gt=0)
    # authenticated peers the transfer server serves at once (more are refused, busy, once
    # their Hello is read)
    max_transfer_connections: int = Field(MAX_CONNECTIONS, ge=1)
    # connections waiting for their Hello, a pool of their own: a new one closes the oldest
    # without a whole Hello waiting to be read (one with a Hello in is kept), so peers that
    # connect and send nothing cannot keep those with a token out. Of each it
    # takes at most 4108 bytes from the socket (a header and a 4 KiB Hello), and checks the
    # Hello's token before any request: the rest waits in the kernel
    max_transfer_hellos: int = Field(MAX_HELLOS, ge=1)
    # with mutual TLS (KVCAST_TLS_*): the time a peer gets to complete its TLS handshake with
    # the transfer server, from its connection's accept (the HTTP API's: http's own key)
    transfer_tls_handshake_timeout_s: float = Field(HANDSHAKE_TIMEOUT_S, gt=0)
    shutdown_grace_s: float = Field(5.0, gt=0)  # time given to HTTP requests in flight
    http: HttpServerConfig = HttpServerConfig()  # bounds on slow or too many HTTP clients
    gc: GcConfig = GcConfig()  # Python's full GC collections, paced (serving/gc_pacing.py)
    token: Token | None = None
    # the engines' token: POST /v1/engine-stats only, never a pull (the CLI reads
    # KVCAST_INGEST_TOKEN); it needs the shared token and differs from it
    ingest_token: Token | None = None
    # tokens that speak for some tenants only (a KV connector's): each entry names its tenants
    # and the variable holding its secret, read at start-up (read_tenant_tokens, by the CLI),
    # never by validating this config; they need the shared token
    tenant_tokens: tuple[AgentTenantToken, ...] = ()
    # Reserve capacity_bytes of host memory up front in slots of this size (None: allocate
    # each received block on demand; slower, as fresh memory is faulted in on first touch).
    pool_slot_bytes: ByteSize | None = Field(None, gt=0)
    # Where stored blocks live: host memory (numpy), or a GPU's memory through torch
    # ("cuda", "cuda:N"; blocks land in pinned host memory and are copied to the device).
    device: str = Field("host", pattern=r"^(host|cuda(:\d{1,3})?)$")

    @model_validator(mode="after")
    def _consistent(self) -> AgentConfig:
        if self.speculative_quota_bytes > self.capacity_bytes:
            raise ValueError(
                f"speculative_quota_bytes ({self.speculative_quota_bytes}) must not exceed "
                f"capacity_bytes ({self.capacity_bytes})"
            )
        slot = self.pool_slot_bytes
        if slot is not None and slot > min(self.capacity_bytes, self.max_block_bytes):
            raise ValueError(  # one slot is reserved at least: more memory than the capacity
                f"pool_slot_bytes ({slot}) must not exceed capacity_bytes "
                f"({self.capacity_bytes}) or max_block_bytes ({self.max_block_bytes})"
            )
        if slot is not None and self.device != "host":
            raise ValueError(
                f"pool_slot_bytes is a host-memory receive pool: not with device {self.device!r}"
            )
        if self.token is not None and len(self.token.get_secret_value().encode()) > MAX_TOKEN_BYTES:
            raise ValueError(f"token must be at most {MAX_TOKEN_BYTES} bytes (UTF-8)")
        check_ingest_token(self.ingest_token_value, self.token_value, (), "ingest_token", "token")
        pulls = sum(e.max_pulls for e in self.tenant_tokens)
        if self.tenant_tokens and pulls >= self.max_transfer_connections:
            raise ValueError(
                f"the tenant tokens' max_pulls add up to {pulls}, not under "
                f"max_transfer_connections ({self.max_transfer_connections}): the agents' own "
                "pulls could find no connection left"
            )
        if self.backoff_base_s > self.backoff_max_s:  # the cap silently won from the first retry
            raise ValueError(f"backoff_base_s ({self.backoff_base_s}) must not exceed "
                             f"backoff_max_s ({self.backoff_max_s})")  # fmt: skip
        http = parse_peer(self.listen, allow_port_zero=True, key="listen")
        transfer = parse_peer(self.transfer_listen, allow_port_zero=True, key="transfer_listen")
        if http[1] != 0 and http[1] == transfer[1] and binds_overlap(http[0], transfer[0]):
            # the second bind failed only at start ("Address already in use", naming neither)
            if http[0].lower() == transfer[0].lower():
                same = f"listen and transfer_listen are the same address ({self.listen!r})"
                raise ValueError(same)
            raise ValueError(
                f"listen {self.listen!r} and transfer_listen {self.transfer_listen!r} overlap: "
                "a wildcard address binds its port on every address"
            )
        return self

    @property
    def token_value(self) -> str | None:
        return self.token.get_secret_value() if self.token else None

    @property
    def ingest_token_value(self) -> str | None:
        return self.ingest_token.get_secret_value() if self.ingest_token else None
