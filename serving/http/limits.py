"""A bound on request bodies, checked before a byte of the body is read: a POST must declare
its ``Content-Length`` (411 otherwise) and stay within ``max_bytes`` (413 otherwise); the
server (h11) refuses a body longer than it declared, so memory per request stays bounded."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in BODY_METHODS:
            declared = dict(scope["headers"]).get(b"content-length")
            if declared is None or not declared.isdigit():
                await _refuse(send, 411, "a body needs a Content-Length")
                return
            if int(declared) > self.max_bytes:
                await _refuse(send, 413, f"body over {self.max_bytes} bytes")
                return
        await self.app(scope, receive, send)


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
