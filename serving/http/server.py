"""Serve an ASGI app with uvicorn on the caller's event loop, beside the service's other
servers, and stop it on request (the caller owns SIGINT/SIGTERM: uvicorn must not re-raise
them after shutdown, which would turn a clean stop into death by signal). Served with h11
whatever else is installed (so that its bound on an unfinished request head holds), with the
bounds of an :class:`HttpServerConfig` (deadlines on each request's head and body and a cap
on connections among them: :mod:`.protocol`), over TLS when given a :class:`ServerTls`, with
its handshake bounded by ``tls_handshake_timeout_s`` (:class:`_Server`)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import socket
import ssl
from collections.abc import Iterator

import uvicorn
from starlette.types import ASGIApp

from kvcast.serving.http.connection_cuts import ConnectionCuts
from kvcast.serving.http.open_files import ensure_open_files
from kvcast.serving.http.protocol import bounded_protocol
from kvcast.serving.http.server_config import HttpServerConfig
from kvcast.serving.tls import ServerTls


class _Server(uvicorn.Server):
    """uvicorn's server, leaving signals to the caller, and over TLS with the handshake bounded.

    uvicorn has no setting for the TLS handshake's time: its ``startup`` creates the listener
    with ``loop.create_server(create_protocol, sock=sock, ssl=config.ssl,
    backlog=config.backlog)``, so asyncio's default (60 s) applies. Over TLS, :meth:`startup`
    does what uvicorn's does for given sockets (read on uvicorn 0.55) and passes asyncio's
    documented ``ssl_handshake_timeout`` too. It relies on what uvicorn's ``startup`` and
    ``shutdown`` share: ``lifespan`` (started first; ``lifespan.state`` given to each
    protocol), ``server_state`` (given to each protocol, whose connections and tasks
    ``shutdown`` waits for), ``servers`` (the listeners ``shutdown`` closes) and ``started``;
    and on the HTTP protocol's constructor (``config``, ``server_state``, ``app_state``), which
    :class:`~kvcast.serving.http.protocol.BoundedProtocol` inherits from uvicorn's
    ``H11Protocol``. Checked on the installed uvicorn by
    tests/serving/http/test_http_tls_handshake.py (a stalled handshake cut at the bound, a
    client served) and tests/serving/sidecar/test_sidecar_api_tls.py (a TLS API served, then
    stopped cleanly by SIGINT/SIGTERM). Plain HTTP takes uvicorn's own ``startup``.
    """

    def __init__(self, config: uvicorn.Config, tls_handshake_timeout_s: float) -> None:
        super().__init__(config)
        self.tls_handshake_timeout_s = tls_handshake_timeout_s

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # signals are the caller's

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        config = self.config
        if config.ssl is None or sockets is None:  # HttpServer always passes its socket
            await super().startup(sockets=sockets)
            return
        await self.lifespan.startup()  # lifespan="off": nothing to start
        if self.lifespan.should_exit:
            raise RuntimeError("the HTTP app failed to start")
        loop = asyncio.get_running_loop()

        def create_protocol() -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state
            )

        bound = self.tls_handshake_timeout_s
        self.servers = []
        for sock in sockets:
            server = await loop.create_server(
                create_protocol, sock=sock, ssl=config.ssl, backlog=config.backlog,
                ssl_handshake_timeout=bound,
            )  # fmt: skip
            self.servers.append(server)
        self.started = True


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port), IPv6 when ``host`` is an IPv6 literal; OSError when
    the address is taken or not local."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # TCP_NODELAY on
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        reason = (err.strerror or str(err)).lower()
        raise OSError(err.errno, f"cannot listen on {where}: {reason}") from None
    return sock


def socket_address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class HttpServer:
    """``await start()`` binds and serves ``app``; ``await stop()`` lets requests in flight
    finish for up to ``grace_s`` seconds, then closes. ``limits``: the bounds on slow or too
    many clients; ``tls``: serve HTTPS (mutual when it names a client CA); ``cuts``: where
    the connections those bounds cut are counted (:attr:`cuts`; a new one when None)."""

    def __init__(
        self, app: ASGIApp, host: str, port: int, grace_s: float = 5.0,
        log_level: str = "warning", tls: ServerTls | None = None,
        limits: HttpServerConfig | None = None, cuts: ConnectionCuts | None = None,
    ) -> None:  # fmt: skip
        self.app, self.host, self.port, self.grace_s = app, host, port, grace_s
        self.log_level, self.tls = log_level, tls
        self.limits = limits if limits is not None else HttpServerConfig()
        self.cuts = cuts if cuts is not None else ConnectionCuts()
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.address = ""

    async def start(self, timeout_s: float = 10.0) -> str:
        ensure_open_files(self.limits.max_connections)  # else accept() fails before the cap
        sock = bind_socket(self.host, self.port)
        self.address = socket_address(sock)
        config = uvicorn.Config(
            self.app,
            log_config=None,
            log_level=self.log_level.lower(),
            access_log=False,
            lifespan="off",
            server_header=False,
            timeout_graceful_shutdown=math.ceil(self.grace_s),
            http=bounded_protocol(self.limits, self.cuts),
            ws="none",  # neither API has a WebSocket route
            h11_max_incomplete_event_size=self.limits.max_incomplete_head_bytes,
            limit_concurrency=self.limits.limit_concurrency,
            timeout_keep_alive=self.limits.timeout_keep_alive_s,  # type: ignore[arg-type]
            **(_uvicorn_tls(self.tls) if self.tls is not None else {}),
        )
        self._server = _Server(config, self.limits.tls_handshake_timeout_s)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        async with asyncio.timeout(timeout_s):
            while not self._server.started:
                if self._task.done():
                    sock.close()
                    self._task.result()  # raises what went wrong
                    raise RuntimeError("HTTP server stopped while starting")
                await asyncio.sleep(0.005)
        return self.address

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def wait(self) -> None:
        """Until the server stops (by :meth:`stop` or a failure, which is raised)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        # a failure of the server is raised by wait(); stopping only has to finish
        await asyncio.gather(self._task, return_exceptions=True)
        self._server, self._task = None, None


def _uvicorn_tls(tls: ServerTls) -> dict[str, object]:
    """uvicorn's settings for ``tls``: with a client CA, a client certificate signed by it is
    required (a client without one, or with one of another CA, fails the handshake)."""
    files: dict[str, object] = {"ssl_certfile": str(tls.cert), "ssl_keyfile": str(tls.key)}
    if tls.client_ca is None:
        return files
    return files | {"ssl_ca_certs": str(tls.client_ca), "ssl_cert_reqs": ssl.CERT_REQUIRED}


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[asyncio.Event]:
    """An event set by SIGINT or SIGTERM while the block runs (handlers removed after)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in STOP_SIGNALS:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    try:
        yield stop
    finally:
        for sig in STOP_SIGNALS:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)


async def serve_until_stopped(http: HttpServer, stop: asyncio.Event) -> None:
    """Return when ``stop`` is set; raise if the HTTP server fails first."""
    stopped = asyncio.create_task(stop.wait())
    serving = asyncio.create_task(http.wait())
    await asyncio.wait({stopped, serving}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if serving.done():
        serving.result()  # the HTTP server failed: raise why
    serving.cancel()
