"""Shared-token authentication: ``Authorization: Bearer <token>`` on protected routes.

:class:`BearerTokenGuard` is ASGI middleware, so a request without the token is refused with
401 before its body is even read (a refused command never reaches validation or a handler).
The comparison is constant-time. :data:`bearer_scheme` only documents the requirement in the
OpenAPI schema; enforcement is the guard's. With no token configured every route is open.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Callable, Collection
from typing import Annotated

from fastapi.security import HTTPBearer
from pydantic import AfterValidator, SecretStr
from starlette.types import ASGIApp, Receive, Scope, Send

bearer_scheme = HTTPBearer(auto_error=False, description="the shared token (KVCAST_TOKEN)")


def _not_blank(token: SecretStr) -> SecretStr:
    if not token.get_secret_value().strip():
        raise ValueError("the token is set but empty; remove it or give it a secret")
    return token


# a config's shared token: an empty one would silently leave every route open, so it is refused
Token = Annotated[SecretStr, AfterValidator(_not_blank)]


def token_matches(header: bytes | None, token: bytes) -> bool:
    """Whether an ``Authorization`` header value carries ``token`` (constant-time)."""
    scheme, _, presented = (header or b"").partition(b" ")
    if scheme.lower() != b"bearer":
        presented = b""
    # compare_digest takes time independent of where the bytes differ
    return hmac.compare_digest(presented.strip(), token)


def token_from_env(value: str | None, name: str) -> str | None:
    """The token in environment variable ``name`` (None when unset); an empty or blank value is
    refused, as it would silently leave every route open."""
    if value is None:
        return None
    if not value.strip():
        raise ValueError(f"{name} is set but empty; unset it or give it a secret")
    return value


def path_pattern(template: str) -> re.Pattern[str]:
    """The paths a route template matches (``/v1/blocks/{block_hash}``: any one segment in
    place of the parameter, as the route's own path converter)."""
    return re.compile("[^/]+".join(map(re.escape, re.split(r"\{[^/}]+\}", template))))


class BearerTokenGuard:
    """Refuses requests to ``protected`` paths (or route templates, ``/v1/blocks/{h}``) that
    lack the token; ``on_refused(path)`` is called once per refusal (to count it). With
    ``methods``, only requests with one of those methods are guarded (e.g. ``POST /v1/mode``
    guarded, ``GET /v1/mode`` open)."""

    def __init__(
        self,
        app: ASGIApp,
        token: str | None,
        protected: Collection[str],
        on_refused: Callable[[str], None] = lambda path: None,
        methods: Collection[str] | None = None,
    ) -> None:
        self.app, self.on_refused = app, on_refused
        self.protected = frozenset(p for p in protected if "{" not in p)
        self.templates = tuple(path_pattern(p) for p in protected if "{" in p)
        self.methods = None if methods is None else frozenset(m.upper() for m in methods)
        self._token = token.encode() if token else None

    def guards(self, path: str) -> bool:
        return path in self.protected or any(t.fullmatch(path) for t in self.templates)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self._token is None
            or scope["type"] != "http"
            or not self.guards(scope["path"])
            or (self.methods is not None and scope["method"] not in self.methods)
            or token_matches(_header(scope, b"authorization"), self._token)
        ):
            await self.app(scope, receive, send)
            return
        self.on_refused(scope["path"])
        body = json.dumps({"detail": "missing or wrong bearer token"}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", b"Bearer"),
        ]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return value
    return None
