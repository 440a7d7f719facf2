"""Prometheus helpers: metric families read live from a service's own counters at scrape time
(no second set of counters to keep in step), and per-route request counting by status.

Each app gets its own :class:`~prometheus_client.CollectorRegistry`, so several services (or
tests) in one process never share or clash over metrics.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

REFUSAL_REASONS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    411: "length_required",
    413: "too_large",
    422: "invalid",
    429: "rate_limited",
}


def refusal_reason(status: int) -> str | None:
    """Why a request with this answer was refused (None: it was accepted)."""
    if status >= 500:
        return "error"
    return REFUSAL_REASONS.get(status, "other") if status >= 400 else None


@dataclass
class Family:
    """One metric family; a counter's ``name`` ends in ``_total``."""

    kind: Literal["counter", "gauge"]
    name: str
    doc: str
    labels: tuple[str, ...] = ()
    samples: list[tuple[tuple[str, ...], float]] = field(default_factory=list)

    def add(self, value: float, *label_values: str) -> Family:
        if len(label_values) != len(self.labels):
            raise ValueError(f"{self.name}: expected labels {self.labels}, got {label_values}")
        self.samples.append((label_values, float(value)))
        return self


class LiveCollector(Collector):
    """Yields the families that ``read()`` builds, at each scrape."""

    def __init__(self, read: Callable[[], Iterable[Family]]) -> None:
        self._read = read

    def collect(self) -> Iterator[Metric]:
        for fam in self._read():
            cls = CounterMetricFamily if fam.kind == "counter" else GaugeMetricFamily
            metric = cls(fam.name, fam.doc, labels=list(fam.labels))
            for label_values, value in fam.samples:
                metric.add_metric(list(label_values), value)
            yield metric


def live_registry(read: Callable[[], Iterable[Family]]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LiveCollector(read))
    return registry


def metrics_response(registry: CollectorRegistry) -> Response:
    """The Prometheus text exposition of ``registry``."""
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


class StatusCounter:
    """ASGI middleware counting requests to ``paths`` by (path, response status) in
    :attr:`counts`; place it outermost so that refusals by other middleware are counted."""

    def __init__(self, app: ASGIApp, paths: Collection[str], counts: Counter) -> None:
        self.app, self.paths, self.counts = app, frozenset(paths), counts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] not in self.paths:
            await self.app(scope, receive, send)
            return
        path, status = scope["path"], 500

        async def send_counted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_counted)
        finally:
            self.counts[(path, status)] += 1
