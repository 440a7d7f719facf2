"""One sidecar process: the :class:`Sidecar` and its HTTP API on one event loop.

``kvcast serve sidecar`` runs :func:`run_sidecar`: it starts every part, logs the ready line
(``sidecar ID ready: http=http://HOST:PORT mode=... model=... nodes=N``), and on SIGINT or
SIGTERM stops the decision loop, lets HTTP requests and agent commands in flight finish (up to
``shutdown_grace_s``), closes the decision log and returns, so the process exits 0.
"""

from __future__ import annotations

import logging

from kvcast.serving.agent.transport import parse_peer
from kvcast.serving.http.server import HttpServer, serve_until_stopped, stop_on_signals
from kvcast.serving.sidecar.api import build_app
from kvcast.serving.sidecar.config import SidecarConfig
from kvcast.serving.sidecar.core import Sidecar
from kvcast.serving.tls import TlsFiles, tls_from_env

log = logging.getLogger("kvcast.serving.sidecar")


class SidecarService:
    """A :class:`Sidecar` and its HTTP server; ``start()`` / ``stop()``."""

    def __init__(
        self, config: SidecarConfig, log_level: str = "warning", tls: TlsFiles | None = None
    ) -> None:
        self.config = config
        self.sidecar = Sidecar(config, tls=tls)
        self.app = build_app(self.sidecar)
        host, port = parse_peer(config.listen, allow_port_zero=True)
        self.http = HttpServer(self.app, host, port, config.shutdown_grace_s, log_level)

    async def start(self) -> str:
        """Start serving; return the HTTP address."""
        await self.sidecar.start()
        try:
            return await self.http.start()
        except BaseException:
            await self.sidecar.stop()
            raise

    async def stop(self) -> None:
        await self.http.stop()
        await self.sidecar.stop()


async def run_sidecar(config: SidecarConfig, log_level: str = "warning") -> None:
    """Serve until SIGINT or SIGTERM (or until the HTTP server fails, which is raised). Calls
    to the agents use mutual TLS when the ``KVCAST_TLS_*`` variables are set."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per agent call at INFO
    tls = tls_from_env()
    plain = [n.name for n in config.nodes if tls and n.agent and n.agent.startswith("http://")]
    if plain:  # every call would fail against agents that speak TLS only
        raise ValueError(f"mutual TLS is on (KVCAST_TLS_*), but nodes {plain} name http:// "
                         "agents: use https:// URLs, or unset KVCAST_TLS_*")  # fmt: skip
    service = SidecarService(config, log_level, tls)
    sc = service.sidecar
    with stop_on_signals() as stop:
        try:
            http = await service.start()
            model = sc.slot.current.info.source if sc.slot.current else "none"
            log.info(
                "sidecar %s ready: http=http://%s mode=%s model=%s nodes=%d engines=%d auth=%s "
                "agent_tls=%s", config.sidecar_id, http, sc.mode, model, len(config.nodes),
                len(sc.feeds), "token" if config.token else "off", "mutual" if tls else "off",
            )  # fmt: skip
            if sc.decision_log is not None:
                log.info("decision log: %s", sc.decision_log.path)
            await serve_until_stopped(service.http, stop)
            log.info("sidecar %s stopping", config.sidecar_id)
        finally:
            await service.stop()
        log.info("sidecar %s stopped", config.sidecar_id)
