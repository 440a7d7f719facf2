"""uvicorn's h11 protocol with the bounds uvicorn lacks: a deadline on a request's head (its
request line and headers) and on its body, and a cap on open connections; counting every
connection it, or uvicorn, cuts.

uvicorn bounds the size of a head (h11's ``max_incomplete_event_size``: 400 and close beyond
it), the idle time between requests on a kept-alive connection (``timeout_keep_alive``, armed
only once a response is complete, and disarmed by any byte that comes in) and the requests in
flight (``limit_concurrency``: 503), but not the time a client takes to send a head or a body,
nor how many connections it holds: a connection that sends nothing after it opens, or a byte
of its headers or body now and then (slowloris), is held for ever. :class:`BoundedProtocol`:

- closes a connection whose head is not all in ``header_timeout_s`` after the connection
  opened (once its TLS handshake is done: the handshake has its own bound,
  ``tls_handshake_timeout_s``, which asyncio enforces before this protocol sees the
  connection, :mod:`.server`) or after its previous response;
- closes a connection whose declared body is not all in ``body_timeout_s`` plus its declared
  length at ``body_min_bytes_per_s`` after its head (the route sees the client gone: a
  request cut mid-body is never handled);
- closes a connection at once when ``max_connections`` are open without it (its file
  descriptor is freed as soon as it is accepted).

A request being handled is not affected; a connection whose route answered before its body was
all in waits for its next head from the end of that body. Each cut is counted in the server's
:class:`~kvcast.serving.http.connection_cuts.ConnectionCuts`, with uvicorn's own 400s for a
malformed request (an oversized or broken head, or a broken chunked body) and 503s past
``limit_concurrency`` (uvicorn decides those from its
``connections`` and ``tasks``; :meth:`BoundedProtocol.handle_events` reads them the same way,
before uvicorn does: uvicorn internals, tested on uvicorn 0.55).
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from kvcast.serving.http.connection_cuts import ConnectionCuts, CutReason
from kvcast.serving.http.server_config import HttpServerConfig


class BoundedProtocol(H11Protocol):
    """:class:`H11Protocol` with :class:`HttpServerConfig`'s bounds (see the module)."""

    limits = HttpServerConfig()  # set per server by bounded_protocol()
    cuts = ConnectionCuts()  # replaced per server by bounded_protocol()
    _timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)  # counts itself in self.connections
        if len(self.connections) > self.limits.max_connections:
            self._cut("over_connections")
            return
        self._await("head")

    def handle_events(self) -> None:
        limit, started = self.limit_concurrency, len(self.tasks)
        over = limit is not None and (len(self.connections) >= limit or started >= limit)
        before = self.conn.their_state
        super().handle_events()
        if over and len(self.tasks) > started:  # a request came in: uvicorn answered it 503
            self.cuts.cut("over_limit", len(self.tasks) - started)
        state = self.conn.their_state
        if state is before or self.transport.is_closing():
            return
        if state is h11.SEND_BODY:  # a head came in, its body is to come
            self._await("body")
        elif state is h11.IDLE:  # a body came in after its response: the next head is due
            self._await("head")
        else:  # the whole request is in (or the connection failed)
            self._stop_timer()

    def send_400_response(self, msg: str) -> None:
        self.cuts.cut("bad_request")
        super().send_400_response(msg)

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request at once
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._await("head")

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        super().connection_lost(exc)

    def _await(self, part: str) -> None:
        self._stop_timer()
        if part == "head":
            self._timer = self.loop.call_later(self.limits.header_timeout_s, self._head_overdue)
        else:
            self._timer = self.loop.call_later(self._body_deadline_s(), self._body_overdue)

    def _body_deadline_s(self) -> float:
        """``body_timeout_s``, plus the declared body's time at ``body_min_bytes_per_s``
        (a chunked body declares no length: the base alone)."""
        declared = dict(self.headers).get(b"content-length", b"")
        size = int(declared) if declared.isdigit() else 0
        return self.limits.body_timeout_s + size / self.limits.body_min_bytes_per_s

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _head_overdue(self) -> None:
        self._timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._cut("head_timeout")

    def _body_overdue(self) -> None:
        self._timer = None
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            self._cut("body_timeout")

    def _cut(self, reason: CutReason) -> None:
        self.cuts.cut(reason)
        self.transport.close()


def bounded_protocol(
    limits: HttpServerConfig, cuts: ConnectionCuts | None = None
) -> type[BoundedProtocol]:
    """The protocol class for uvicorn's ``http=`` with ``limits``' deadlines and connection
    cap, counting the connections it cuts in ``cuts`` (a new one when None)."""
    attrs = {"limits": limits, "cuts": cuts if cuts is not None else ConnectionCuts()}
    return type("BoundedProtocol", (BoundedProtocol,), attrs)
