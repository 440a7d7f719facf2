"""The Grafana dashboard for a kvcast deployment: the sidecar's and the agents' Prometheus
metrics on one page (``kvcast.json`` beside this file, made by this script).

    python deploy/grafana/dashboard.py > deploy/grafana/kvcast.json

Import ``kvcast.json`` in Grafana (Dashboards -> New -> Import) and pick the Prometheus data
source that scrapes the sidecar's and every agent's ``/metrics``. The rows follow the data
flow: what the sidecar ingests, what it decides and how long a tick takes, what the copies
bought, and each agent's memory and transfers. ``tests/deploy/test_grafana_dashboard.py``
checks that the committed JSON is this script's output and that every metric a panel queries
is one the services serve.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

RATE = "[$__rate_interval]"
DATASOURCE = {"name": "datasource", "label": "Prometheus", "type": "datasource",
              "query": "prometheus", "current": {}}  # fmt: skip


@dataclass(frozen=True)
class Panel:
    title: str
    exprs: tuple[tuple[str, str], ...]  # (PromQL, legend)
    unit: str = "short"
    description: str = ""


def _q(quantile: float, histogram: str) -> str:
    return f"histogram_quantile({quantile}, sum by (le) (rate({histogram}_bucket{RATE})))"


ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    ("Sidecar: ingestion", (
        Panel("Events in", (
            (f"sum by (source) (rate(kvcast_sidecar_events_in_total{RATE}))", "{{source}}"),
        ), "ops", "Arrivals and KV events queued per second, by source."),
        Panel("Events dropped", (
            (f"sum by (reason) (rate(kvcast_sidecar_events_dropped_total{RATE}))", "{{reason}}"),
            (f"sum by (reason) (rate(kvcast_sidecar_feature_bad_input_total{RATE}))",
             "refused: {{reason}}"),
        ), "ops", "The bounded queue drops its oldest events when full; the feature state "
                  "refuses malformed ones."),
        Panel("Queue fill", (
            ("kvcast_sidecar_queue_events / kvcast_sidecar_queue_capacity_events", "now"),
            ("kvcast_sidecar_queue_peak_events / kvcast_sidecar_queue_capacity_events", "peak"),
        ), "percentunit"),
        Panel("KV event streams", (
            (f"sum by (node) (increase(kvcast_sidecar_kv_gaps_total{RATE}))", "gaps {{node}}"),
            (f"sum by (node) (increase(kvcast_sidecar_kv_restarts_total{RATE}))",
             "restarts {{node}}"),
            (f"sum by (node) (increase(kvcast_sidecar_kv_replayed_total{RATE}))",
             "replayed {{node}}"),
        ), "short", "Sequence gaps, engine restarts and batches caught up from the replay "
                    "socket, per node."),
    )),
    ("Sidecar: decisions", (
        Panel("Decision tick latency", (
            (_q(0.5, "kvcast_sidecar_tick_seconds"), "tick p50"),
            (_q(0.99, "kvcast_sidecar_tick_seconds"), "tick p99"),
            (_q(0.99, "kvcast_sidecar_features_seconds"), "features p99"),
            (_q(0.99, "kvcast_sidecar_scoring_seconds"), "scoring p99"),
            (_q(0.99, "kvcast_sidecar_decide_seconds"), "decide p99"),
            (_q(0.99, "kvcast_sidecar_log_write_seconds"), "log writes p99 (after the tick)"),
        ), "s"),
        Panel("GC pauses", (
            ("histogram_quantile(0.99, sum by (le, generation, kind) "
             "(increase(kvcast_sidecar_gc_pause_seconds_bucket[10m])))",
             "gen {{generation}} {{kind}} p99"),
            ("histogram_quantile(0.99, sum by (le, generation, kind, instance) "
             "(increase(kvcast_agent_gc_pause_seconds_bucket[10m])))",
             "agent {{instance}} gen {{generation}} {{kind}} p99"),
        ), "s", "Python's cyclic GC, each collection's pause (every thread stops), over 10 "
                "minutes: full ones (gen 2) paced (the sidecar's between ticks), "
                "gc.full_every_s apart; a thaw scans the whole heap every gc.thaw_every."),
        Panel("Decisions", (
            (f"sum by (kind) (rate(kvcast_sidecar_decisions_total{RATE}))", "{{kind}}"),
        ), "ops", "Commands the decider made per second (in shadow mode: logged only)."),
        Panel("Budget refusals", (
            (f"sum by (budget) (rate(kvcast_sidecar_decider_refusals_total{RATE}))",
             "{{budget}}"),
        ), "ops", "Copies that paid off but a hard budget refused."),
        Panel("Mode and model", (
            ("max by (mode) (kvcast_sidecar_mode)", "{{mode}}"),
            ("kvcast_sidecar_model_loaded", "model loaded"),
            (f"increase(kvcast_sidecar_model_refusals_total{RATE})", "models refused"),
            (f"increase(kvcast_sidecar_tick_errors_total{RATE})", "tick errors"),
        )),
    )),
    ("Replication outcomes", (
        Panel("Replications", (
            (f"rate(kvcast_sidecar_replications_issued_total{RATE})", "issued"),
            (f"rate(kvcast_sidecar_replications_done_total{RATE})", "done"),
            (f"sum by (reason) (rate(kvcast_sidecar_replications_failed_total{RATE}))",
             "failed: {{reason}}"),
        ), "ops"),
        Panel("Replicated bytes", (
            (f"rate(kvcast_sidecar_replicated_bytes_total{RATE})", "replicated"),
        ), "Bps"),
        Panel("Replica hit rate", (
            ("kvcast_sidecar_replica_hit_rate", "used / (used + wasted)"),
            ("kvcast_sidecar_decider_p_factor", "decider P(hit) correction"),
        ), "percentunit", "The share of speculative replicas that a request then used, and "
                          "the factor the decider applies to P(hit) from its copies' fates."),
        Panel("Replica fates", (
            (f"rate(kvcast_sidecar_replicas_used_total{RATE})", "used"),
            (f"rate(kvcast_sidecar_replicas_wasted_total{RATE})", "wasted"),
            (f"rate(kvcast_sidecar_replicas_lost_on_agents_total{RATE})", "lost on agents"),
        ), "ops"),
    )),
    ("Agents", (
        Panel("Agents up", (("kvcast_sidecar_agent_up", "{{node}}"),)),
        Panel("Memory watermark", (
            ("sum by (instance) (kvcast_agent_store_bytes) / on (instance) "
             "kvcast_agent_capacity_bytes", "{{instance}}"),
        ), "percentunit", "Bytes held (active + cached + speculative) over capacity."),
        Panel("Speculative bytes over quota", (
            ("sum by (instance) (kvcast_agent_store_bytes{state=\"speculative\"}) / on "
             "(instance) kvcast_agent_speculative_quota_bytes", "{{instance}}"),
        ), "percentunit", "Never above 1: the agent refuses a replica past its quota."),
        Panel("Transfer throughput", (
            (f"sum by (instance) (rate(kvcast_agent_bytes_pulled_total{RATE}))",
             "pulled {{instance}}"),
            (f"sum by (instance) (rate(kvcast_agent_bytes_served_total{RATE}))",
             "served {{instance}}"),
        ), "Bps"),
        Panel("Transfer faults", (
            (f"sum by (instance) (rate(kvcast_agent_checksum_failures_total{RATE}))",
             "checksum {{instance}}"),
            (f"sum by (instance) (rate(kvcast_agent_deadline_cancellations_total{RATE}))",
             "deadline {{instance}}"),
            (f"sum by (instance) (rate(kvcast_agent_pull_retries_total{RATE}))",
             "retries {{instance}}"),
            (f"sum by (instance) (rate(kvcast_agent_transfer_version_refusals_total{RATE}))",
             "other protocol version {{instance}}"),
        ), "ops"),
        Panel("Refused for a bad token", (
            (f"sum by (surface) (rate(kvcast_agent_auth_failures_total{RATE}))",
             "agent {{surface}}"),
            (f"rate(kvcast_sidecar_auth_failures_total{RATE})", "sidecar"),
            (f"sum by (reason) (rate(kvcast_sidecar_tenant_refusals_total{RATE}))",
             "sidecar tenant token: {{reason}}"),
            (f"sum by (reason) (rate(kvcast_agent_http_tenant_refusals_total{RATE}))",
             "agent tenant token: {{reason}}"),
            (f"sum by (instance) (rate(kvcast_agent_transfer_tenant_refusals_total{RATE}))",
             "agent tenant token pull {{instance}}"),
            (f"sum by (instance) (rate(kvcast_agent_transfer_tenant_busy_refusals_total{RATE}))",
             "agent tenant token over max_pulls {{instance}}"),
            (f"sum by (instance) (rate(kvcast_agent_http_tenant_rate_limited_total{RATE}))",
             "agent tenant token over its rate {{instance}}"),
            (f"rate(kvcast_sidecar_ingest_refusals_total{RATE})", "sidecar ingest token: route"),
            (f"sum by (instance) (rate(kvcast_agent_http_ingest_refusals_total{RATE}))",
             "agent ingest token: route {{instance}}"),
        ), "ops", "Requests without a known token (KVCAST_TOKEN, KVCAST_INGEST_TOKEN or a "
           "tenant token): refused with 401; a tenant token on another route or tenant: 403 "
           "(route, tenant; on an agent also state: an active upload), or a pull of another "
           "tenant's blocks (agent tenant token pull); over its arrival rate: 429 (rate), over "
           "its share of the sidecar's ingestion queue: 429 (queue_share), or a batch over its "
           "burst: 400 (burst); the ingest token on a route other than its reports (arrivals, "
           "KV events, engine stats): 403 (ingest token: route)."),
        Panel("HTTP connections cut", (
            (f"sum by (reason) (rate(kvcast_sidecar_http_connections_cut_total{RATE}))",
             "sidecar {{reason}}"),
            (f"sum by (reason) (rate(kvcast_agent_http_connections_cut_total{RATE}))",
             "agents {{reason}}"),
        ), "ops", "Connections the servers' http: bounds cut: head_timeout (header_timeout_s), "
           "body_timeout (body_timeout_s), bad_request (400), over_limit (503, "
           "limit_concurrency), over_connections (max_connections)."),
    )),
)  # fmt: skip


def _panel(panel: Panel, ident: int, x: int, y: int) -> dict[str, Any]:
    return {
        "id": ident,
        "type": "timeseries",
        "title": panel.title,
        "description": panel.description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 6, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(panel.exprs)
        ],
    }


def build() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model."""
    panels: list[dict[str, Any]] = []
    y = 0
    for title, row in ROWS:
        panels.append({"id": len(panels) + 1, "type": "row", "title": title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})  # fmt: skip
        y += 1
        for i, panel in enumerate(row):
            panels.append(_panel(panel, len(panels) + 1, 6 * (i % 4), y + 8 * (i // 4)))
        y += 8 * -(-len(row) // 4)
    return {
        "uid": "kvcast",
        "title": "kvcast: predictive KV replication",
        "tags": ["kvcast", "llm-serving"],
        "timezone": "browser",
        "schemaVersion": 39,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [DATASOURCE]},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
