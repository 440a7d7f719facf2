"""The options naming the token variables of ``kvcast serve`` and ``kvcast cluster``
(``--token-env``, ``--ingest-token-env``), and what they may name.

Left out, an option names its default variable (``KVCAST_TOKEN``, ``KVCAST_INGEST_TOKEN``),
and that variable unset means no such token: the quickstart and a local cluster run so. Given,
even naming the default, an option asks for that token: a variable it names that is not set
stops the command in one line naming both, rather than letting it run without the token asked
for. A config's ``token:`` or ``ingest_token:`` does not stand in for it either: the option says
where the token is, and a service started with another secret than the one its clients hold
would only refuse them. A value that is no variable's name (the token itself, pasted in) is
refused without being shown.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from kvcast.serving.http.token_env import (
    INGEST_TOKEN_ENV,
    NOT_A_NAME,
    SHARED_TOKEN_ENV,
    is_env_name,
)

GIVEN = "named here, it must be set (a token in the config does not stand in for it)"
TokenEnv = Annotated[
    str,
    typer.Option(
        "--token-env",
        help=f"Environment variable holding the shared token. Left out: {SHARED_TOKEN_ENV}, "
        f"none when that is unset; {GIVEN}.",
    ),
]
IngestTokenEnv = Annotated[
    str,
    typer.Option(
        "--ingest-token-env",
        help="Environment variable holding the ingest token: reports only (it needs the shared "
        "token and must differ from it and from every tenant token). Left out: "
        f"{INGEST_TOKEN_ENV}, none when that is unset; {GIVEN}.",
    ),
]
# each option's parameter, flag, default variable and the token it holds
OPTIONS = (
    ("token_env", "--token-env", SHARED_TOKEN_ENV, "a shared token"),
    ("ingest_token_env", "--ingest-token-env", INGEST_TOKEN_ENV, "an ingest token"),
)


def check_token_options(ctx: typer.Context) -> None:
    """A ValueError for a token option of ``ctx``'s command whose value is no variable's name
    (never shown), or one given (not left to its default) naming a variable that is not
    set: the token it asks for would silently be missing."""
    for param, flag, default, token in OPTIONS:
        name = ctx.params[param]
        if not is_env_name(name):
            raise ValueError(f"{flag} {NOT_A_NAME}")
        if given(ctx, param) and name not in os.environ:
            other = f", or with {default}'s when that is set" if name != default else ""
            raise ValueError(f"{flag} {name}: the variable is not set (set it, or leave the "
                             f"option out to run without {token}{other})")  # fmt: skip


def check_cluster_options(ctx: typer.Context, variables: tuple[str | None, str | None],
                          where: str) -> None:  # fmt: skip
    """A ValueError for a token option given to a command that reads the token variables of
    the cluster in ``where`` instead (``variables``: its shared and ingest token variables,
    None: started without that token), unless it names the same variable."""
    for (param, flag, _, token), var in zip(OPTIONS, variables, strict=True):
        if given(ctx, param) and ctx.params[param] != var:
            uses = f"reads {token} from {var}" if var else f"was started without {token}"
            raise ValueError(f"{flag}: the cluster in {where} {uses}: leave {flag} out")


def given(ctx: typer.Context, param: str) -> bool:
    """Whether ``param`` of ``ctx``'s command was given (on the command line, say) rather than
    left to its default. Its source is told by name: typer may bring a click of its own, whose
    ``ParameterSource`` is not click's."""
    source = ctx.get_parameter_source(param)
    return source is not None and source.name != "DEFAULT"
