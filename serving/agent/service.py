"""One agent process: the TCP transfer server and the HTTP control API on one event loop.

``kvcast serve agent`` runs :func:`run_agent`: it starts both servers, logs their addresses,
and on SIGINT or SIGTERM stops accepting, lets HTTP requests in flight finish (up to
``shutdown_grace_s``), aborts pulls being served and returns, so the process exits 0.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from kvcast.serving.agent.agent import Agent
from kvcast.serving.agent.api import build_app
from kvcast.serving.agent.config import AgentConfig
from kvcast.serving.agent.control import AgentControl
from kvcast.serving.agent.seed import seed_blocks
from kvcast.serving.agent.transport import parse_peer
from kvcast.serving.gc_pacing import GcPacer
from kvcast.serving.http.auth import reachable_without_token
from kvcast.serving.http.server import HttpServer, serve_until_stopped, stop_on_signals
from kvcast.serving.http.tenant_tokens import TenantTokens
from kvcast.serving.tls import TlsFiles, tls_from_env

log = logging.getLogger("kvcast.serving.agent")


@dataclass(frozen=True, slots=True)
class SeedSpec:
    """Random verified blocks to store at startup (a debug and test aid)."""

    blocks: int
    tenant: str
    block_bytes: int


class AgentService:
    """An :class:`Agent` and its control API; ``start()`` / ``stop()``."""

    def __init__(
        self, config: AgentConfig, seed: SeedSpec | None = None, log_level: str = "warning",
        tls: TlsFiles | None = None, tenant_tokens: TenantTokens | None = None,
    ) -> None:  # fmt: skip
        """``tenant_tokens``: the secrets of ``config.tenant_tokens`` (see :class:`Agent`)."""
        self.config, self.seed, self.tls = config, seed, tls
        self.agent = Agent(config, tls=tls, tenant_tokens=tenant_tokens)
        self.control = AgentControl(self.agent)
        self.app = build_app(
            self.control, config.token_value, self.agent.tenant_tokens, config.ingest_token_value
        )
        host, port = parse_peer(config.listen, allow_port_zero=True)
        self.http = HttpServer(
            self.app, host, port, config.shutdown_grace_s, log_level,
            tls=None if tls is None else tls.server(), limits=config.http,
            cuts=self.control.http_cuts,
        )  # fmt: skip

    async def start(self) -> tuple[str, str]:
        """Start serving; return (HTTP address, transfer address)."""
        transfer = await self.agent.start()
        try:
            if self.seed is not None and self.seed.blocks > 0:
                s = self.seed
                seed_blocks(
                    self.agent.store,
                    s.blocks,
                    s.tenant,
                    s.block_bytes,
                    buffer_for=self.agent.buffer_for,
                )
            http = await self.http.start()
        except BaseException:
            await self.agent.stop()
            raise
        return http, transfer

    async def stop(self) -> None:
        self.control.accepting = False
        await self.http.stop()
        await self.agent.stop()


async def run_agent(
    config: AgentConfig, seed: SeedSpec | None = None, log_level: str = "warning",
    tenant_tokens: TenantTokens | None = None,
) -> None:  # fmt: skip
    """Serve until SIGINT or SIGTERM (or until the HTTP server fails, which is raised). Mutual
    TLS when the ``KVCAST_TLS_*`` variables are set (:mod:`kvcast.serving.tls`).
    ``tenant_tokens``: the secrets of ``config.tenant_tokens``, read by the caller (the CLI:
    :func:`~kvcast.serving.http.tenant_tokens.read_tenant_tokens`)."""
    tls = tls_from_env()
    service = AgentService(config, seed, log_level, tls, tenant_tokens)
    pacer = service.agent.gc
    pacing: asyncio.Task[None] | None = None
    with stop_on_signals() as stop:
        try:
            http, transfer = await service.start()
            pacer.start(config.gc.paced)  # after the seed blocks: frozen with the rest
            if config.gc.paced:
                pacing = asyncio.create_task(_pace(pacer, min(1.0, config.gc.full_every_s / 2)))
            held = len(service.agent.store)
            log.info(
                "agent %s ready: http=%s://%s transfer=%s blocks=%d auth=%s tls=%s device=%s",
                config.node_id, "https" if tls else "http", http, transfer, held,
                "token" if config.token else "off", "mutual" if tls else "off", config.device,
            )  # fmt: skip
            if open_to := reachable_without_token(config.token, [http, transfer], tls is not None):
                log.warning(
                    "no token (KVCAST_TOKEN) and listening on %s: anyone who can reach it "
                    "can send this agent commands that move and delete KV data",
                    ", ".join(open_to),
                )
            if config.ingest_token:  # reports only: the shared token keeps every right
                log.info("ingest token: POST /v1/engine-stats only, no pulls")
            if config.tenant_tokens:  # the shared token keeps every right beside them
                tenants = sorted({t for e in config.tenant_tokens for t in e.tenants})
                log.info("tenant tokens: %d, for tenants %s", len(config.tenant_tokens), tenants)
                if uncapped := [e.token_env for e in config.tenant_tokens if e.max_bytes is None]:
                    log.warning(
                        "tenant tokens without max_bytes (%s): their uploads may fill this "
                        "agent and evict other tenants' cached blocks",
                        ", ".join(uncapped),
                    )
            await serve_until_stopped(service.http, stop)
            log.info("agent %s stopping", config.node_id)
        finally:
            if pacing is not None:
                pacing.cancel()
            try:
                await service.stop()
            finally:
                pacer.stop()
        log.info("agent %s stopped", config.node_id)


async def _pace(pacer: GcPacer, every_s: float) -> None:
    """The agent has no decision tick: its paced full collections run from this task, on the
    event loop (each pause bounded by the blocks stored since the last one)."""
    while True:
        await asyncio.sleep(every_s)
        pacer.maybe_collect()
