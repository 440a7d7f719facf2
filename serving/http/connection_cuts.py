"""Connections an HTTP server cut, most before any route saw their request: counted by
reason, so that ``/metrics`` shows a slowloris, a flood past ``limit_concurrency`` or a client
that sends broken heads, not just the requests the routes answered.

Reasons: ``head_timeout`` (a request head not all in within ``header_timeout_s``: closed),
``body_timeout`` (a declared body not all in by its deadline, ``body_timeout_s`` plus its length
at ``body_min_bytes_per_s`` after its head: closed; its route sees the client gone),
``bad_request`` (a malformed head, an unfinished one past ``max_incomplete_head_bytes``, or a
broken chunked body: answered 400 and closed), ``over_limit`` (a request that came with
``limit_concurrency`` connections or requests open: answered 503 and closed),
``over_connections`` (a connection accepted with ``max_connections`` open: closed at once).
Counted on the server's event loop.

Not counted: a connection cut because its TLS handshake was not done within
``tls_handshake_timeout_s``. asyncio's TLS layer enforces that bound and drops the connection
without telling the HTTP protocol, which it only hands the connection once the handshake is
done (it never learns of the connection otherwise, nor whether its handshake failed, timed out
or was refused for a bad certificate), and without logging it (outside asyncio's debug mode).
Counting it would mean doing the TLS handshake outside asyncio's listener (``loop.start_tls``
on each accepted plain connection), which hands over the HTTP protocol only after asyncio has
delivered it the first decrypted bytes, or reaching into asyncio's private ``sslproto``.
"""

from __future__ import annotations

from typing import Literal

from kvcast.serving.http.metrics import Family

CutReason = Literal["head_timeout", "body_timeout", "bad_request", "over_limit", "over_connections"]
CUT_REASONS: tuple[CutReason, ...] = (
    "head_timeout", "body_timeout", "bad_request", "over_limit", "over_connections",
)  # fmt: skip


class ConnectionCuts:
    """Counts of connections cut, by :data:`CutReason`."""

    def __init__(self) -> None:
        self.counts: dict[CutReason, int] = dict.fromkeys(CUT_REASONS, 0)

    def cut(self, reason: CutReason, n: int = 1) -> None:
        self.counts[reason] += n

    def family(self, prefix: str) -> Family:
        """``{prefix}http_connections_cut_total{reason}``, every reason present (0 or more)."""
        fam = Family(
            "counter", prefix + "http_connections_cut_total",
            "Connections the HTTP server cut before a route saw their request",
            ("reason",),
        )  # fmt: skip
        for reason, n in self.counts.items():
            fam.add(n, reason)
        return fam
