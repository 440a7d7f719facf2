"""``kvcast serve``: kvcast's long-running processes (``agent``, ``sidecar``)."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from kvcast.cli.common import user_errors
from kvcast.cli.token_options import IngestTokenEnv, TokenEnv, check_token_options
from kvcast.serving.http.token_env import INGEST_TOKEN_ENV, SHARED_TOKEN_ENV

serve_app = typer.Typer(
    help="Run kvcast's long-running services.", no_args_is_help=True, add_completion=False
)
LOG_LEVELS = ("debug", "info", "warning", "error")


def flag_size(flag: str, text: str) -> int:
    from kvcast.serving.agent.sizes import parse_size

    try:
        return parse_size(text)
    except ValueError as err:
        raise ValueError(f"{flag}: {err}") from None


def settings_source(config: Path | None, flags: list[str]) -> str:
    """How an error names where the settings came from: the config file and the options given
    over it (``sidecar.yaml with command line (--mode)``), so that an option's bad value is
    not blamed on a file that does not hold it."""
    from kvcast.config import command_line

    given = command_line(flags) if flags else "command line"
    if config is None:
        return given
    return f"{config} with {given}" if flags else str(config)


def env_tokens(
    data: dict[str, Any], token_env: str, ingest_env: str,
    check_shared: Callable[[str, str], None] | None = None,
) -> None:  # fmt: skip
    """Set ``data``'s ``token`` and ``ingest_token`` from the variables ``token_env`` and
    ``ingest_env`` when they are set (over the config file's keys); a ValueError naming the
    variable (or the key) when one is set but blank, when ``check_shared(token, token_env)``
    refuses the shared token read from ``token_env`` (an agent's: it must fit a transfer
    Hello), or when the ingest token has no shared token beside it or equals it
    (:func:`~kvcast.serving.http.ingest_token.check_ingest_token`). Never a secret in a
    message."""
    from kvcast.serving.http.auth import token_from_env
    from kvcast.serving.http.ingest_token import check_ingest_token

    names = {"token": "the config's token", "ingest_token": "the config's ingest_token"}
    for key, env in (("token", token_env), ("ingest_token", ingest_env)):
        if (value := token_from_env(os.environ.get(env), env)) is not None:
            if key == "token" and check_shared is not None:
                check_shared(value, env)
            data[key], names[key] = value, env
    ingest, shared = data.get("ingest_token"), data.get("token")
    if isinstance(ingest, str) and (shared is None or isinstance(shared, str)):  # else: types
        shared_name = names["token"] if shared is not None else token_env
        check_ingest_token(ingest, shared, (), names["ingest_token"], shared_name)


def agent_settings(
    config: Path | None,
    flags: dict[str, Any],
    sizes: dict[str, tuple[str, str | None]],
    token_env: str,
    ingest_env: str = INGEST_TOKEN_ENV,
) -> Any:
    """The :class:`AgentConfig` from ``config`` (YAML), overridden by ``flags`` and ``sizes``
    (``--capacity 64GiB``) when given, the shared token and the ingest token from the
    environment variables ``token_env`` and ``ingest_env`` (:func:`env_tokens`)."""
    from kvcast.config import ConfigError, option, parse_config, read_yaml
    from kvcast.serving.agent.config import AgentConfig, check_hello_fits

    data = read_yaml(config) if config is not None else {}
    if not isinstance(data, dict):
        raise ValueError(f"{config}: expected a mapping at the top level")
    if unknown := [k for k in data if k not in AgentConfig.model_fields]:  # before "required":
        more = f" (and {len(unknown) - 3} more unknown keys)" if len(unknown) > 3 else ""
        raise ConfigError(  # another service's file is wrong by its keys, not by what it lacks
            "; ".join(f"{config}: key '{k}': unknown key" for k in unknown[:3]) + more
        )
    data |= {k: v for k, v in flags.items() if v is not None}
    given = [option(k) for k, v in flags.items() if v is not None]
    for key, (flag, text) in sizes.items():
        if text is not None:
            data[key] = flag_size(flag, text)
            given.append(flag)
        elif key not in data:
            raise ValueError(f"{flag} is required (or {key} in --config)")
    env_tokens(data, token_env, ingest_env, check_hello_fits)
    return parse_config(AgentConfig, data, source=settings_source(config, given))


@serve_app.command("agent")
@user_errors
def agent_cmd(
    ctx: typer.Context,
    node_id: Annotated[
        str | None,
        typer.Option("--node-id", help="This node's id (default: the config's, else agent-0)."),
    ] = None,
    listen: Annotated[
        str | None, typer.Option("--listen", help="HTTP control API, HOST:PORT (0: any port).")
    ] = None,
    transfer_listen: Annotated[
        str | None,
        typer.Option("--transfer-listen", help="TCP server peers pull from, HOST:PORT."),
    ] = None,
    capacity: Annotated[
        str | None,
        typer.Option(
            "--capacity",
            help="Block store bytes: 68719476736 or 64GiB (required unless the config sets "
            "capacity_bytes).",
        ),
    ] = None,
    speculative_quota: Annotated[
        str | None,
        typer.Option(
            "--speculative-quota",
            help="Bytes for speculative replicas (required unless the config sets "
            "speculative_quota_bytes).",
        ),
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="Agent YAML (configs/serving/agent.yaml).")
    ] = None,
    device: Annotated[
        str | None,
        typer.Option("--device", help="Where blocks live: host (default), cuda or cuda:N."),
    ] = None,
    token_env: TokenEnv = SHARED_TOKEN_ENV,
    ingest_token_env: IngestTokenEnv = INGEST_TOKEN_ENV,
    seed_blocks: Annotated[
        int, typer.Option("--seed-blocks", min=0, help="Debug: store N random blocks at start.")
    ] = 0,
    seed_tenant: Annotated[
        str, typer.Option("--seed-tenant", help="Debug: tenant of the seeded blocks.")
    ] = "seed",
    seed_block_bytes: Annotated[
        str, typer.Option("--seed-block-bytes", help="Debug: size of each seeded block.")
    ] = "64KiB",
    log_level: Annotated[str, typer.Option("--log-level", help="debug|info|warning|error.")] = (
        "info"
    ),
) -> None:
    """Run a KV transfer agent: block store, peer transfers (TCP) and HTTP control API.

    Stops cleanly on SIGINT or SIGTERM.

    With the token variable set, data commands need "Authorization: Bearer TOKEN". The
    config's tenant_tokens: name further variables, each holding a token for some tenants only
    (a KV connector's: evict, release, upload, list and pull those tenants' blocks; 403 on
    the other data routes).

    With the ingest token variable set as well (--ingest-token-env, KVCAST_INGEST_TOKEN), that
    token is the engines': it may only POST /v1/engine-stats (an engine's queue depth); every
    other data route is 403 to it, and a pull with it is refused as with an unknown token.
    """
    from kvcast.serving.agent.config import MAX_TOKEN_BYTES
    from kvcast.serving.agent.service import SeedSpec, run_agent
    from kvcast.serving.http.tenant_tokens import read_tenant_tokens

    check_token_options(ctx)
    if log_level not in LOG_LEVELS:
        raise ValueError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}")
    flags = {"node_id": node_id, "listen": listen, "transfer_listen": transfer_listen,
             "device": device}  # fmt: skip
    sizes = {
        "capacity_bytes": ("--capacity", capacity),
        "speculative_quota_bytes": ("--speculative-quota", speculative_quota),
    }
    cfg = agent_settings(config, flags, sizes, token_env, ingest_token_env)
    # read here, as the shared token: the config itself never depends on the environment
    tenant_tokens = read_tenant_tokens(
        cfg.tenant_tokens, cfg.token_value, os.environ, MAX_TOKEN_BYTES, cfg.ingest_token_value
    )
    seed = None
    if seed_blocks:
        if not seed_tenant:
            raise ValueError("--seed-tenant must not be empty")
        seed = SeedSpec(seed_blocks, seed_tenant, flag_size("--seed-block-bytes", seed_block_bytes))
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    uvicorn_level = "debug" if log_level == "debug" else "warning"
    try:
        asyncio.run(run_agent(cfg, seed, uvicorn_level, tenant_tokens))
    except KeyboardInterrupt:  # a signal before the handlers were installed
        raise typer.Exit(130) from None


@serve_app.command("sidecar")
@user_errors
def sidecar_cmd(
    ctx: typer.Context,
    config: Annotated[
        Path, typer.Option("--config", help="Sidecar YAML (configs/serving/sidecar.yaml).")
    ],
    listen: Annotated[
        str | None, typer.Option("--listen", help="HTTP API, HOST:PORT (0: any port).")
    ] = None,
    mode: Annotated[str | None, typer.Option("--mode", help="shadow|active.")] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="ONNX path or models:/name@alias.")
    ] = None,
    token_env: TokenEnv = SHARED_TOKEN_ENV,
    ingest_token_env: IngestTokenEnv = INGEST_TOKEN_ENV,
    log_level: Annotated[str, typer.Option("--log-level", help="debug|info|warning|error.")] = (
        "info"
    ),
) -> None:
    """Run the router sidecar: ingest arrivals and KV events, score, decide, command agents.

    Stops cleanly on SIGINT or SIGTERM. With the token variable set, every POST and the block
    lookups (GET /v1/blocks/..., /v1/decisions) need "Authorization: Bearer TOKEN", and the
    sidecar sends it to the agents. The config's tenant_tokens: name further variables, each
    holding a token for some tenants only (their arrivals, decisions and blocks; 403 on the
    other guarded routes). With a tls: section in the config, the API is served over
    HTTPS (mutual TLS with tls.client_ca); KVCAST_TLS_* are the sidecar's certificate for
    https:// agents.

    With the ingest token variable set as well (--ingest-token-env, KVCAST_INGEST_TOKEN), that
    token is the router's and the engines': it may only POST /v1/requests (any tenant's
    arrivals, queue depths included) and /v1/kv-events; mode, model, decisions and block
    lookups are 403 to it.
    """
    from kvcast.config import option, parse_config, read_yaml
    from kvcast.serving.http.tenant_tokens import read_tenant_tokens
    from kvcast.serving.sidecar.config import SidecarConfig
    from kvcast.serving.sidecar.service import run_sidecar

    check_token_options(ctx)
    if log_level not in LOG_LEVELS:
        raise ValueError(f"--log-level must be one of {', '.join(LOG_LEVELS)}, got {log_level!r}")
    data = read_yaml(config)
    if not isinstance(data, dict):
        raise ValueError(f"{config}: expected a mapping at the top level")
    flags = {"listen": listen, "mode": mode, "model": model}
    for key, value in flags.items():
        if value is not None and not value.strip():  # was taken for not given
            raise ValueError(f"--{key} must not be empty, got {value!r}")
    data |= {k: v for k, v in flags.items() if v is not None}
    given = [option(k) for k, v in flags.items() if v is not None]
    env_tokens(data, token_env, ingest_token_env)
    cfg = parse_config(SidecarConfig, data, source=settings_source(config, given))
    cfg.feature_config  # noqa: B018 - load the feature and decider files now: errors exit 2
    cfg.decider_config  # noqa: B018
    # the tenant tokens' secrets, from their variables (errors name the variable): here, as the
    # shared token's, so that the config itself never depends on the environment
    tenant_tokens = read_tenant_tokens(
        cfg.tenant_tokens, cfg.token_value, os.environ, ingest=cfg.ingest_token_value
    )
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    uvicorn_level = "debug" if log_level == "debug" else "warning"
    try:
        asyncio.run(run_sidecar(cfg, uvicorn_level, tenant_tokens))
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
