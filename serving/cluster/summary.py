"""What a replay did, as the services themselves count it: the sidecar's and the agents'
Prometheus ``/metrics`` and the agents' ``/v1/telemetry``, beside the replay's own counts.

Metric samples are keyed ``name{label=value,...}`` (labels sorted), e.g.
``kvcast_sidecar_decisions_total{kind=replicate}``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

S, A = "kvcast_sidecar_", "kvcast_agent_"


def parse_metrics(text: str) -> dict[str, float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def by_label(metrics: Mapping[str, float], name: str) -> dict[str, float]:
    """The samples of ``name`` with one label, by that label's value."""
    prefix = name + "{"
    return {k[len(prefix) :].split("=", 1)[1].rstrip("}"): v
            for k, v in metrics.items() if k.startswith(prefix)}  # fmt: skip


async def scrape(http: httpx.AsyncClient, base: str) -> dict[str, float]:
    r = await http.get(f"{base}/metrics")
    r.raise_for_status()
    return parse_metrics(r.text)


async def kv_received(http: httpx.AsyncClient, sidecar: str) -> dict[str, float]:
    """KV-event messages the sidecar received over ZMQ, by node name."""
    return by_label(await scrape(http, sidecar), S + "kv_received_total")


async def collect(
    http: httpx.AsyncClient, sidecar: str, agents: Sequence[str]
) -> tuple[dict[str, float], list[dict[str, float]], list[dict[str, Any]]]:
    """(sidecar metrics, each agent's metrics, each agent's telemetry), scraped together."""
    side, *rest = await asyncio.gather(
        scrape(http, sidecar), *(scrape(http, a) for a in agents),
        *(http.get(f"{a}/v1/telemetry") for a in agents),
    )  # fmt: skip
    n = len(agents)
    return side, list(rest[:n]), [r.json() for r in rest[n:]]


def summarize(
    replay: Mapping[str, Any], sidecar: Mapping[str, float], agents: Sequence[Mapping[str, float]],
    telemetry: Sequence[Mapping[str, Any]], names: Sequence[str],
) -> dict[str, Any]:  # fmt: skip
    """One JSON-ready summary: the replay's counts, the sidecar's view, each agent's."""
    decisions = by_label(sidecar, S + "decisions_total")
    failed = sum(by_label(sidecar, S + "replications_failed_total").values())
    pulled = sum(m.get(A + "bytes_pulled_total", 0.0) for m in agents)
    per_agent = [
        {
            "node": name,
            "blocks_pulled": int(m.get(A + "blocks_pulled_total", 0)),
            "bytes_pulled": int(m.get(A + "bytes_pulled_total", 0)),
            "bytes_served": int(m.get(A + "bytes_served_total", 0)),
            "checksum_failures": int(m.get(A + "checksum_failures_total", 0)),
            "speculative_bytes": int(t["bytes"]["speculative"]),
            "peak_speculative_bytes": int(t["peak_speculative_bytes"]),
            "speculative_quota_bytes": int(t["speculative_quota_bytes"]),
            "used_bytes": int(t["used_bytes"]),
        }
        for name, m, t in zip(names, agents, telemetry, strict=True)
    ]
    return {
        "replay": dict(replay),
        "sidecar": {
            "events_in": {k: int(v) for k, v in by_label(sidecar, S + "events_in_total").items()},
            "decisions": {k: int(v) for k, v in decisions.items()},
            "replications_issued": int(sidecar.get(S + "replications_issued_total", 0)),
            "replications_done": int(sidecar.get(S + "replications_done_total", 0)),
            "replications_failed": int(failed),
            "replicated_bytes": int(sidecar.get(S + "replicated_bytes_total", 0)),
            "replica_hit_rate": sidecar.get(S + "replica_hit_rate", 0.0),
            "kv_gaps": int(sum(by_label(sidecar, S + "kv_gaps_total").values())),
            "decision_log_rows": int(sidecar.get(S + "decision_log_rows_total", 0)),
        },
        "agents": per_agent,
        "agents_bytes_pulled": int(pulled),
        "metrics_agree": int(pulled) == int(sidecar.get(S + "replicated_bytes_total", 0)),
    }
