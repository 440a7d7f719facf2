"""How an HTTP API is served: bounds on what clients can hold (:class:`HttpServerConfig`, the
``http:`` section of the sidecar's and the agents' configs) and TLS on it
(:class:`ServerTlsConfig`, the sidecar's ``tls:`` section).

What each bound covers (uvicorn with h11, :mod:`.server`):

- ``limit_concurrency``: a request that arrives while that many connections are open (its own
  included) or that many requests are being handled is answered 503 at once, without running
  the app (uvicorn's ``limit_concurrency``). Connections are still accepted: each holds a file
  descriptor until a limit below closes it.
- ``max_connections``: a connection accepted while that many are open is closed at once
  (:mod:`.protocol`; uvicorn has no such limit), so that what connections hold (a file
  descriptor and buffers each) is bounded.
- ``header_timeout_s``: a connection whose request line and headers (its head) are not all in
  that long after it opened (after the TLS handshake) or after its previous response is closed
  (:mod:`.protocol`; uvicorn has no such limit).
- ``body_timeout_s`` and ``body_min_bytes_per_s``: a connection whose declared body is not all
  in ``body_timeout_s`` plus its declared length at ``body_min_bytes_per_s`` after its head is
  closed, the request unhandled (:mod:`.protocol`; uvicorn has no such limit): a small body
  gets the base, a large upload (an agent's ``PUT /v1/blocks``) the time it needs at that rate.
- ``timeout_keep_alive_s``: a connection idle that long after a response is closed (uvicorn's
  ``timeout_keep_alive``).
- ``max_incomplete_head_bytes``: a head still unfinished with more than this buffered is
  answered 400 and closed (h11's ``max_incomplete_event_size``). A head that arrives whole in
  one read is parsed whatever its size, so what one connection's head can hold is this plus
  one read (asyncio reads at most 256 KiB at a time).

- ``tls_handshake_timeout_s``: over TLS, a connection whose TLS handshake is not done that
  long after it was accepted is closed, whether the peer sent nothing or dribbles its
  ClientHello (asyncio's ``ssl_handshake_timeout``, set on the listener by :mod:`.server`;
  asyncio's default, 60 s, otherwise). Until its handshake is done a connection is not among
  those ``max_connections`` counts, yet holds a file descriptor and asyncio's TLS buffers: this
  bound is what frees them. Not counted among the cut connections (:mod:`.connection_cuts`
  says why). Plain HTTP: no effect.

A body's size is bounded by the API's body limit (:mod:`.limits`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BeforeValidator, Field, FilePath, model_validator

from kvcast.config import FiniteConfig
from kvcast.serving.tls import HANDSHAKE_TIMEOUT_S, ServerTls

MAX_INCOMPLETE_HEAD_BYTES = 16 << 10  # h11's own default


def _size(value: object) -> object:
    # imported here: the agent package, which holds the size parser, imports this module
    from kvcast.serving.agent.sizes import parse_size

    return parse_size(value) if isinstance(value, str | int) else value


Bytes = Annotated[int, BeforeValidator(_size)]  # 16384 or "16KiB", as the agent's ByteSize


class HttpServerConfig(FiniteConfig):
    """Bounds on slow or too many clients of an HTTP API; times in seconds."""

    # connections open or requests in flight at which a request is answered 503 (1 would
    # refuse every request: a request's own connection counts)
    limit_concurrency: int = Field(512, ge=2)
    # connections open at which another one is closed as soon as it is accepted
    max_connections: int = Field(1024, ge=2)
    timeout_keep_alive_s: float = Field(5.0, gt=0)  # idle time allowed between requests
    header_timeout_s: float = Field(10.0, gt=0)  # to send a request line and its headers
    body_timeout_s: float = Field(30.0, gt=0)  # to send a declared body, from its head ...
    body_min_bytes_per_s: Bytes = Field(1 << 20, ge=1024)  # ... plus its length at this rate
    # an unfinished request head buffered beyond this is refused (400)
    max_incomplete_head_bytes: Bytes = Field(MAX_INCOMPLETE_HEAD_BYTES, ge=1024, le=1 << 20)
    # over TLS: to complete the handshake, from the connection's accept
    tls_handshake_timeout_s: float = Field(HANDSHAKE_TIMEOUT_S, gt=0)

    @model_validator(mode="after")
    def _cap_above_limit(self) -> HttpServerConfig:
        if self.max_connections < self.limit_concurrency:  # the 503s would never be reached
            raise ValueError(
                f"max_connections ({self.max_connections}) must be at least limit_concurrency "
                f"({self.limit_concurrency})"
            )
        return self


class ServerTlsConfig(FiniteConfig):
    """TLS on an HTTP API: the server's certificate chain and key (PEM files) and, for mutual
    TLS, the CA its clients' certificates must be signed by (None: any client may connect)."""

    cert: FilePath
    key: FilePath
    client_ca: FilePath | None = None

    def server_tls(self, section: str = "tls") -> ServerTls:
        """The files, checked to load (a ValueError naming ``section``'s keys otherwise)."""
        keys = ("cert", "key", "client_ca") if self.client_ca else ("cert", "key")
        names = "/".join(f"{section}.{k}" for k in keys)
        tls = ServerTls(Path(self.cert), Path(self.key), self.client_ca)
        return tls.checked(names)
