"""The environment variables that hold tokens: their default names, and what a name must be.

A token is never written in a config file or on a command line: ``--token-env``,
``--ingest-token-env``, a config's ``tenant_tokens[].token_env`` and ``cluster.json`` name
the variable holding it. A name is letters, digits and ``_``, not starting with a digit
(:func:`is_env_name`). Anything else is most likely the secret itself, pasted where its
variable's name belongs, so whatever refuses it says so in the words of :data:`NOT_A_NAME`,
never showing the value.
"""

from __future__ import annotations

import re

SHARED_TOKEN_ENV = "KVCAST_TOKEN"  # the shared token's variable, unless an option names another
INGEST_TOKEN_ENV = "KVCAST_INGEST_TOKEN"  # the ingest token's
MAX_NAME_CHARS = 256
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# why a value that is not a name is refused, following what it is given as (never the value)
NOT_A_NAME = (
    f"must name an environment variable (up to {MAX_NAME_CHARS} letters, digits and _, not "
    "starting with a digit), not hold the token itself (the value given is not shown)"
)


def is_env_name(name: object) -> bool:
    """Whether ``name`` is a string that names an environment variable (at most
    ``MAX_NAME_CHARS`` characters)."""
    return isinstance(name, str) and len(name) <= MAX_NAME_CHARS and bool(_NAME.fullmatch(name))
