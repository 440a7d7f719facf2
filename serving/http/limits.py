"""A bound on request bodies, checked before a byte of the body is read: a POST must declare
its ``Content-Length`` (411 otherwise) and stay within ``max_bytes`` (413 otherwise); the
server (h11) refuses a body longer than it declared, so memory per request stays bounded.
A request with a ``Transfer-Encoding`` (a chunked body, whatever length it also declares:
the encoding wins, and its body has no bound) is refused 411 on every method.
``per_path`` gives some paths a bound of their own (e.g. an upload of block bytes)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from starlette.types import ASGIApp, Receive, Scope, Send

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class BodySizeLimit:
    def __init__(
        self, app: ASGIApp, max_bytes: int, per_path: Mapping[str, int] | None = None
    ) -> None:
        self.app, self.max_bytes, self.per_path = app, max_bytes, dict(per_path or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if b"transfer-encoding" in headers:
            await _refuse(send, 411, "a body needs a Content-Length, not a Transfer-Encoding")
            return
        if scope["method"] in BODY_METHODS:
            declared = headers.get(b"content-length")
            if declared is None or not declared.isdigit():
                await _refuse(send, 411, "a body needs a Content-Length")
                return
            limit = self.per_path.get(scope["path"], self.max_bytes)
            if int(declared) > limit:
                await _refuse(send, 413, f"body over {limit} bytes")
                return
        await self.app(scope, receive, send)


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
