"""Bearer-token authentication: ``Authorization: Bearer <token>`` on protected routes.

:class:`BearerTokenGuard` is ASGI middleware, so a request without a known token is refused
with 401 before its body is even read (a refused command never reaches validation or a
handler). Besides the shared token (every right) it may know *tenant tokens*, each speaking for
some tenants only: those reach only the routes named ``tenant_paths`` (others are 403), and the
guard hands the handler the request's :class:`Identity` (:func:`request_identity`) to narrow
what it does or shows to those tenants. It may also know the *ingest token* (the router's and
the engines': it reports what happened and calls no command): it speaks for every tenant, as
the shared token, but reaches only the routes named ``ingest_routes`` (method and path; others
are 403, ``on_ingest_forbidden``), so the guard alone is what restricts it; it needs a shared
token and must differ from it and from every tenant token (:mod:`.ingest_token`). Every
comparison is constant-time, and every known token is compared. Each API documents the
requirement in its OpenAPI schema with a ``fastapi.security.HTTPBearer`` of its own;
enforcement is the guard's. With no token configured every route is open.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from pydantic import AfterValidator, SecretStr
from starlette.types import ASGIApp, Receive, Scope, Send

from kvcast.serving.cluster.ports import is_loopback
from kvcast.serving.http.ingest_token import check_ingest_token
from kvcast.serving.http.token_text import token_problem


def _presentable(token: SecretStr) -> SecretStr:
    if (problem := token_problem(token.get_secret_value())) is not None:
        raise ValueError(f"the token {problem}")
    return token


# a config's token: an empty one would silently leave every route open, and one no header can
# present (padded, non-ASCII) would lock out every holder, so both are refused
Token = Annotated[SecretStr, AfterValidator(_presentable)]


def presented_token(header: bytes | None) -> bytes:
    """The token an ``Authorization`` header value carries (empty: none, or not Bearer)."""
    scheme, _, presented = (header or b"").partition(b" ")
    return presented.strip() if scheme.lower() == b"bearer" else b""


def digest(token: bytes) -> bytes:
    """What a token is compared by: its SHA-256 (32 bytes whatever its length), so that a
    comparison's time tells neither where two tokens differ nor how long the secret is."""
    return hashlib.sha256(token).digest()


def token_matches(header: bytes | None, token: bytes) -> bool:
    """Whether an ``Authorization`` header value carries ``token`` (constant-time)."""
    return hmac.compare_digest(digest(presented_token(header)), digest(token))


@dataclass(frozen=True, slots=True)
class Identity:
    """Whom a request's token speaks for: every tenant (``tenants`` None: the shared token,
    the ingest token, or no token configured) or only ``tenants`` (a tenant token). ``token``
    tells tenant tokens apart (two may speak for the same tenants): its position among the
    guard's ``tenant_tokens`` (None: not a tenant token). ``ingest``: the ingest token's,
    which the guard lets reach its ``ingest_routes`` only (and a transfer server never
    admits)."""

    tenants: frozenset[str] | None = None
    token: int | None = None
    ingest: bool = False

    @property
    def all_tenants(self) -> bool:
        """Whether it speaks for every tenant (the ingest token too, on the routes it may
        reach: what a handler narrows by; which routes a token reaches is the guard's)."""
        return self.tenants is None

    def speaks_for(self, tenant: str) -> bool:
        return self.tenants is None or tenant in self.tenants


ADMIN = Identity()
INGEST = Identity(ingest=True)  # every tenant's reports, on the guard's ingest_routes only
NOBODY = Identity(frozenset())  # a request the guard did not admit: no tenant's data
IDENTITY = "identity"  # its key in the ASGI scope's ``state`` (``request.state.identity``)


def request_identity(request: Request) -> Identity:
    """The identity the guard admitted ``request`` with (a FastAPI dependency); a route the
    guard does not protect has none, and is answered as for no tenant."""
    return request.scope.get("state", {}).get(IDENTITY, NOBODY)


# a handler's parameter: the identity its request was admitted with
Who = Annotated[Identity, Depends(request_identity)]


def reachable_without_token(
    token: object, addresses: Iterable[str], mutual_tls: bool = False
) -> list[str]:
    """Those of ``addresses`` (HOST:PORT, as bound) that others than this host reach, when
    ``token`` is None (none when a token is set, or when ``mutual_tls`` admits only peers with
    a certificate of the cluster's CA): a service listening there without either takes
    commands that move and delete KV data from anyone who can reach it."""
    if token is not None or mutual_tls:
        return []
    return [a for a in addresses if not is_loopback(a.rpartition(":")[0])]


def token_from_env(value: str | None, name: str) -> str | None:
    """The token in environment variable ``name`` (None when unset); an empty or blank value is
    refused, as it would silently leave every route open, and so is one no bearer header can
    present (:func:`~kvcast.serving.http.token_text.token_problem`)."""
    if value is None:
        return None
    if (problem := token_problem(value)) is not None:
        raise ValueError(f"{name} {problem}")
    return value


def tokens_from_env(
    environ: Mapping[str, str], token_env: str, ingest_env: str | None
) -> tuple[str | None, str | None]:
    """The shared token and the ingest token in the variables ``token_env`` and ``ingest_env``
    (None: no ingest token is looked for), each None when unset; refused as
    :func:`token_from_env` and :func:`~kvcast.serving.http.ingest_token.check_ingest_token`
    refuse them, naming the variables."""
    token = token_from_env(environ.get(token_env), token_env)
    if ingest_env is None:
        return token, None
    ingest = environ.get(ingest_env)
    check_ingest_token(ingest, token, (), ingest_env, token_env)  # (its text as token_from_env)
    return token, ingest


def path_pattern(template: str) -> re.Pattern[str]:
    """The paths a route template matches (``/v1/blocks/{block_hash}``: any one segment in
    place of the parameter, as the route's own path converter)."""
    return re.compile("[^/]+".join(map(re.escape, re.split(r"\{[^/}]+\}", template))))


class PathSet:
    """Paths and route templates (``/v1/blocks/{h}``: any one segment in its place)."""

    def __init__(self, paths: Collection[str]) -> None:
        self.exact = frozenset(p for p in paths if "{" not in p)
        self.templates = tuple(path_pattern(p) for p in paths if "{" in p)

    def __contains__(self, path: object) -> bool:
        assert isinstance(path, str)
        return path in self.exact or any(t.fullmatch(path) for t in self.templates)


class KnownTokens:
    """The shared token (every right), the tenant tokens (``tenant_tokens``: secret -> the
    tenants it speaks for) and the ingest token (:data:`INGEST`) a service knows. A tenant
    token's ``Identity.token`` is its position in ``tenant_tokens``' order. With no shared
    token, every presented token (none included) is the shared token's: nothing is guarded.
    A transfer server is never given the ingest token: there it is unknown, as any other."""

    def __init__(
        self, token: str | None, tenant_tokens: Mapping[str, Collection[str]] | None = None,
        ingest_token: str | None = None,
    ) -> None:  # fmt: skip
        if tenant_tokens and not token:  # nothing would guard what they may not do
            raise ValueError("tenant tokens need a shared token: it guards the other routes")
        check_ingest_token(ingest_token, token or None, tenant_tokens or {})
        self._token = digest(token.encode()) if token else None
        known = [
            (digest(secret.encode()), Identity(frozenset(tenants), i))
            for i, (secret, tenants) in enumerate((tenant_tokens or {}).items())
        ]
        if ingest_token is not None:
            known.append((digest(ingest_token.encode()), INGEST))
        self._known = tuple(known)

    def identify(self, presented: bytes) -> Identity | None:
        """Whom ``presented`` speaks for (None: no known token). Every known token is
        compared, in constant time each (by :func:`digest`), whichever matches."""
        if self._token is None:
            return ADMIN
        mine = digest(presented)
        found = ADMIN if hmac.compare_digest(mine, self._token) else None
        for secret, identity in self._known:
            if hmac.compare_digest(mine, secret):  # tokens differ: one matches at most
                found = identity
        return found


class BearerTokenGuard:
    """Refuses requests to ``protected`` paths (or route templates, ``/v1/blocks/{h}``) that
    lack a known token (401); ``on_refused(path)`` is called once per refusal (to count it).
    With ``methods``, only requests with one of those methods are guarded (e.g.
    ``POST /v1/mode`` guarded, ``GET /v1/mode`` open).

    ``tenant_tokens`` (token -> the tenants it speaks for) may reach only the protected paths in
    ``tenant_paths``; elsewhere they are refused with 403 (``on_forbidden(path)``). The
    ``ingest_token`` may reach only the ``ingest_routes`` (method, path: a route's other methods
    are not its); elsewhere it is refused with 403 (``on_ingest_forbidden(path)``). An admitted
    request carries its :class:`Identity` in ``scope["state"]`` for the handler; a tenant
    token's ``Identity.token`` is its position in ``tenant_tokens``' order."""

    def __init__(
        self,
        app: ASGIApp,
        token: str | None,
        protected: Collection[str],
        on_refused: Callable[[str], None] = lambda path: None,
        methods: Collection[str] | None = None,
        tenant_tokens: Mapping[str, Collection[str]] | None = None,
        tenant_paths: Collection[str] = (),
        on_forbidden: Callable[[str], None] = lambda path: None,
        ingest_token: str | None = None,
        ingest_routes: Collection[tuple[str, str]] = (),
        on_ingest_forbidden: Callable[[str], None] = lambda path: None,
    ) -> None:
        self.app, self.on_refused, self.on_forbidden = app, on_refused, on_forbidden
        self.on_ingest_forbidden = on_ingest_forbidden
        self.protected, self.tenant_paths = PathSet(protected), PathSet(tenant_paths)
        verbs = {m.upper() for m, _ in ingest_routes}
        self.ingest_routes = {
            v: PathSet([p for m, p in ingest_routes if m.upper() == v]) for v in verbs
        }
        routes = sorted(f"{m.upper()} {p}" for m, p in ingest_routes)
        self.reports = ", ".join(routes) or "none here"  # for its 403s
        self.methods = None if methods is None else frozenset(m.upper() for m in methods)
        self.tokens = KnownTokens(token, tenant_tokens, ingest_token)

    def guards(self, path: str) -> bool:
        return path in self.protected

    def ingest_reaches(self, method: str, path: str) -> bool:
        """Whether ``method path`` is one of the ingest token's routes."""
        paths = self.ingest_routes.get(method)
        return paths is not None and path in paths

    def identify(self, header: bytes | None) -> Identity | None:
        """Whom the header's token speaks for (None: no known token)."""
        return self.tokens.identify(presented_token(header))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or not self.guards(scope["path"])
            or (self.methods is not None and scope["method"] not in self.methods)
        ):
            await self.app(scope, receive, send)
            return
        identity = self.identify(_header(scope, b"authorization"))
        if identity is None:
            self.on_refused(scope["path"])
            await refuse(
                send, 401, "missing or wrong bearer token", [(b"www-authenticate", b"Bearer")]
            )
            return
        what = f"{scope['method']} {scope['path']}"
        if identity.ingest and not self.ingest_reaches(scope["method"], scope["path"]):
            self.on_ingest_forbidden(scope["path"])
            await refuse(send, 403, f"the ingest token may not use {what}: it may only report "
                         f"({self.reports}); this route needs another token")  # fmt: skip
            return
        if not identity.all_tenants and scope["path"] not in self.tenant_paths:
            self.on_forbidden(scope["path"])
            await refuse(send, 403, f"a tenant token may not use {what}: it needs the shared token")
            return
        scope.setdefault("state", {})[IDENTITY] = identity
        await self.app(scope, receive, send)


async def refuse(
    send: Send, status: int, detail: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return value
    return None
