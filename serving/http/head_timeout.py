"""uvicorn's h11 protocol with a deadline on reading a request's head (its request line and
headers), counting the connections it cuts.

uvicorn bounds the size of a head (h11's ``max_incomplete_event_size``: 400 and close beyond
it) and the idle time between requests on a kept-alive connection (``timeout_keep_alive``,
armed only once a response is complete, and disarmed by any byte that comes in), but not the
time a client takes to send a head: a connection that sends nothing after it opens, or a byte
of its headers now and then (slowloris), is held for ever, and counts against
``limit_concurrency`` meanwhile. :func:`head_timeout_protocol` closes a connection whose head
is not all in ``timeout_s`` after the connection opened (once its TLS handshake is done) or
after its previous response. A request being handled, or a body being read, is not affected.
Each connection cut before a route sees its request is counted in the server's
:class:`~kvcast.serving.http.connection_cuts.ConnectionCuts`: by this deadline, by uvicorn's
400 for a bad or oversized head, or by its 503 past ``limit_concurrency`` (it decides that
from its own ``connections`` and ``tasks``; the check below reads them the same way, before
uvicorn does: tested on uvicorn 0.55).
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from kvcast.serving.http.connection_cuts import ConnectionCuts


class HeadTimeoutProtocol(H11Protocol):
    """:class:`H11Protocol` that closes a connection whose next request head is overdue."""

    head_timeout_s = 10.0  # set per server by head_timeout_protocol()
    cuts = ConnectionCuts()  # replaced per server by head_timeout_protocol()
    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def handle_events(self) -> None:
        limit, started = self.limit_concurrency, len(self.tasks)
        over = limit is not None and (len(self.connections) >= limit or started >= limit)
        super().handle_events()
        if over and len(self.tasks) > started:  # a request came in: uvicorn answered it 503
            self.cuts.cut("over_limit", len(self.tasks) - started)
        if self.conn.their_state is not h11.IDLE:  # a head came in (or the connection failed)
            self._stop_head_timer()

    def send_400_response(self, msg: str) -> None:
        self.cuts.cut("bad_head")
        super().send_400_response(msg)

    def on_response_complete(self) -> None:
        super().on_response_complete()  # may start a pipelined request at once
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        self._stop_head_timer()
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_overdue)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_overdue(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.cuts.cut("head_timeout")
            self.transport.close()


def head_timeout_protocol(
    timeout_s: float, cuts: ConnectionCuts | None = None
) -> type[HeadTimeoutProtocol]:
    """The protocol class for uvicorn's ``http=`` with this deadline on each request head,
    counting the connections it cuts in ``cuts`` (a new one when None)."""
    if not timeout_s > 0:
        raise ValueError(f"a head timeout must be > 0 s, got {timeout_s}")
    attrs = {"head_timeout_s": timeout_s, "cuts": cuts if cuts is not None else ConnectionCuts()}
    return type("HeadTimeoutProtocol", (HeadTimeoutProtocol,), attrs)
