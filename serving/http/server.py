"""Serve an ASGI app with uvicorn on the caller's event loop, beside the service's other
servers, and stop it on request (the caller owns SIGINT/SIGTERM: uvicorn must not re-raise
them after shutdown, which would turn a clean stop into death by signal)."""

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

from kvcast.serving.tls import TlsFiles


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # signals are the caller's


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
    finish for up to ``grace_s`` seconds, then closes."""

    def __init__(
        self, app: ASGIApp, host: str, port: int, grace_s: float = 5.0,
        log_level: str = "warning", tls: TlsFiles | None = None,
    ) -> None:  # fmt: skip
        self.app, self.host, self.port, self.grace_s = app, host, port, grace_s
        self.log_level, self.tls = log_level, tls
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.address = ""

    async def start(self, timeout_s: float = 10.0) -> str:
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
            **(_mutual_tls(self.tls) if self.tls is not None else {}),
        )
        self._server = _Server(config)
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


def _mutual_tls(tls: TlsFiles) -> dict[str, object]:
    """uvicorn's settings for TLS that requires a client certificate signed by the CA."""
    return {
        "ssl_certfile": str(tls.cert), "ssl_keyfile": str(tls.key),
        "ssl_ca_certs": str(tls.ca), "ssl_cert_reqs": ssl.CERT_REQUIRED,
    }  # fmt: skip


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
