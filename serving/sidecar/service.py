"""One sidecar process: the :class:`Sidecar` and its HTTP API on one event loop.

``kvcast serve sidecar`` runs :func:`run_sidecar`: it starts every part, logs the ready line
(``sidecar ID ready: http=http://HOST:PORT mode=... model=... nodes=N ... api_tls=off
agent_tls=off``; ``https://`` and ``api_tls=on`` or ``mutual`` with the config's ``tls:``
section), and on SIGINT or SIGTERM stops the decision loop, lets HTTP requests and agent
commands in flight finish (up to ``shutdown_grace_s``), closes the decision log and returns,
so the process exits 0.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from kvcast.serving.agent.transport import parse_peer
from kvcast.serving.http.auth import reachable_without_token
from kvcast.serving.http.server import HttpServer, serve_until_stopped, stop_on_signals
from kvcast.serving.sidecar.api import build_app
from kvcast.serving.sidecar.config import SidecarConfig
from kvcast.serving.sidecar.core import Sidecar
from kvcast.serving.tls import ServerTls, TlsFiles, tls_from_env

log = logging.getLogger("kvcast.serving.sidecar")


class SidecarService:
    """A :class:`Sidecar` and its HTTP server; ``start()`` / ``stop()``. ``tls``: the
    sidecar's certificate for its calls to the agents; ``api_tls``: TLS on its own API;
    ``tenant_tokens``: the secrets of the config's ``tenant_tokens`` (token -> tenants, as
    :func:`~kvcast.serving.http.tenant_tokens.read_tenant_tokens` reads them)."""

    def __init__(
        self, config: SidecarConfig, log_level: str = "warning", tls: TlsFiles | None = None,
        api_tls: ServerTls | None = None,
        tenant_tokens: Mapping[str, frozenset[str]] | None = None,
    ) -> None:  # fmt: skip
        self.config = config
        self.sidecar = Sidecar(config, tls=tls, tenant_tokens=tenant_tokens)
        self.app = build_app(self.sidecar)
        host, port = parse_peer(config.listen, allow_port_zero=True)
        self.http = HttpServer(
            self.app, host, port, config.shutdown_grace_s, log_level, tls=api_tls,
            limits=config.http, cuts=self.sidecar.http_cuts,
        )  # fmt: skip

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


async def run_sidecar(
    config: SidecarConfig, log_level: str = "warning",
    tenant_tokens: Mapping[str, frozenset[str]] | None = None,
) -> None:  # fmt: skip
    """Serve until SIGINT or SIGTERM (or until the HTTP server fails, which is raised). Calls
    to the agents use mutual TLS when the ``KVCAST_TLS_*`` variables are set; the API is served
    over TLS when the config has a ``tls:`` section (a ValueError naming its keys when its
    files do not load). ``tenant_tokens``: the secrets of the config's ``tenant_tokens``, read
    by the caller (the CLI: :func:`~kvcast.serving.http.tenant_tokens.read_tenant_tokens`)."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per agent call at INFO
    tls = tls_from_env()
    api_tls = None if config.tls is None else config.tls.server_tls()
    plain = [n.name for n in config.nodes if tls and n.agent and n.agent.startswith("http://")]
    if plain:  # every call would fail against agents that speak TLS only
        raise ValueError(f"mutual TLS is on (KVCAST_TLS_*), but nodes {plain} name http:// "
                         "agents: use https:// URLs, or unset KVCAST_TLS_*")  # fmt: skip
    service = SidecarService(config, log_level, tls, api_tls, tenant_tokens)
    sc = service.sidecar
    with stop_on_signals() as stop:
        try:
            http = await service.start()
            sc.gc.start(config.gc.paced)  # after the model loaded: frozen with the rest
            model = sc.slot.current.info.source if sc.slot.current else "none"
            log.info(
                "sidecar %s ready: http=%s://%s mode=%s model=%s nodes=%d engines=%d auth=%s "
                "api_tls=%s agent_tls=%s", config.sidecar_id, "https" if api_tls else "http",
                http, sc.mode, model, len(config.nodes), len(sc.feeds),
                "token" if config.token else "off", _tls_mode(api_tls),
                "mutual" if tls else "off",
            )  # fmt: skip
            mutual = api_tls is not None and api_tls.mutual
            if open_to := reachable_without_token(config.token, [http], mutual):
                log.warning(
                    "no token (KVCAST_TOKEN) and listening on %s: anyone who can reach it "
                    "can send this sidecar commands that move and delete KV data",
                    ", ".join(open_to),
                )
            if config.ingest_token:  # reports only: the shared token keeps every right
                log.info("ingest token: POST /v1/requests and /v1/kv-events only")
            if config.tenant_tokens:  # the shared token keeps every right beside them
                tenants = sorted({t for e in config.tenant_tokens for t in e.tenants})
                log.info("tenant tokens: %d, for tenants %s", len(config.tenant_tokens), tenants)
            if sc.decision_log is not None:
                log.info("decision log: %s", sc.decision_log.path)
            await serve_until_stopped(service.http, stop)
            log.info("sidecar %s stopping", config.sidecar_id)
        finally:
            try:
                await service.stop()
            finally:
                sc.gc.stop()
        log.info("sidecar %s stopped", config.sidecar_id)


def _tls_mode(tls: ServerTls | None) -> str:
    """How the API is served, as the ready line says it: off, on (TLS) or mutual."""
    return "off" if tls is None else "mutual" if tls.mutual else "on"
