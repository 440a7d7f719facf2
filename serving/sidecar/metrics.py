"""The sidecar's Prometheus metrics (``kvcast_sidecar_*``), read at scrape time from the
counters its parts keep, plus the latency histograms the decision loop observes.

Events in (by source), dropped (queue full) and bad (by the feature state's reason); the KV
subscribers' counters per node (gaps, restarts, replays, decode errors); decisions by kind;
the decider's copies settled and used and its P(hit) correction; replications issued /
done / failed / retried / dropped and their bytes; replica hit rate; model kind, version and
digest; agents up; tick, feature, scoring and decide latencies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Literal

from prometheus_client import CollectorRegistry, Histogram

from kvcast.serving.http.metrics import Family, live_registry
from kvcast.serving.kv_events.subscriber import KvSubscriberCounters
from kvcast.serving.sidecar.decision_loop import TickTimers

if TYPE_CHECKING:
    from kvcast.serving.sidecar.core import Sidecar

P = "kvcast_sidecar_"
# tick timings, seconds: finest around the tick's 2 ms goal
BUCKETS = (1e-4, 2.5e-4, 5e-4, 7.5e-4, 1e-3, 1.5e-3, 2e-3, 3e-3, 5e-3, 7.5e-3, 1e-2, 2.5e-2,
           5e-2, 0.1, 0.25, 1.0)  # fmt: skip


Kind = Literal["counter", "gauge"]


def _one(kind: Kind, name: str, doc: str, value: float) -> Family:
    return Family(kind, P + name, doc).add(value)


def _labelled(kind: Kind, name: str, doc: str, label: str, values: Mapping[str, float]) -> Family:
    fam = Family(kind, P + name, doc, (label,))
    for key, value in sorted(values.items()):
        fam.add(value, key)
    return fam


def timers(registry: CollectorRegistry) -> TickTimers:
    def hist(name: str, doc: str) -> Histogram:
        return Histogram(P + name, doc, registry=registry, buckets=BUCKETS)

    return TickTimers(
        tick=hist("tick_seconds", "Decision tick, snapshot to commands"),
        features=hist("features_seconds", "Feature rows of the tick's candidate blocks"),
        scoring=hist("scoring_seconds", "ONNX scoring of the tick's candidate blocks"),
        decide=hist("decide_seconds", "Cluster view and decider"),
        logs=hist("log_write_seconds", "Decision and routes logs' writes after each tick"),
    )


def subscriber_families(sc: Sidecar) -> list[Family]:
    out = []
    for f in fields(KvSubscriberCounters):
        fam = Family("counter", f"{P}kv_{f.name}_total", f"KV subscriber: {f.name}", ("node",))
        for feed in sc.feeds:
            fam.add(getattr(feed.counters, f.name), feed.name)
        out.append(fam)
    return out


def sidecar_families(sc: Sidecar) -> list[Family]:
    q, k, loop, ex, rep = sc.queue, sc.keeper, sc.loop, sc.executor, sc.replicas
    names = sc.cfg.node_names
    info = Family("gauge", P + "info", "This sidecar", ("sidecar_id",)).add(1, sc.cfg.sidecar_id)
    mode = _labelled("gauge", "mode", "1 for the running mode", "mode",
                     {m: float(sc.mode == m) for m in ("shadow", "active")})  # fmt: skip
    model = Family("gauge", P + "model_info", "The model scoring decisions",
                   ("kind", "version", "digest", "source", "registry_version"))  # fmt: skip
    if (current := sc.slot.current) is not None:
        i = current.info
        registry = "" if i.registry_version is None else str(i.registry_version)
        model.add(1, i.kind, i.version, i.digest, i.source, registry)
    bad = {r: float(n) for r, n in sc.state.counters.items() if r != "reordered"}
    return [
        info, mode, model,
        _one("gauge", "model_loaded", "1 when a model is loaded", float(current is not None)),
        _one("counter", "model_loads_total", "Models swapped in", sc.slot.loads),
        _one("counter", "model_refusals_total", "Models refused", sc.slot.refused),
        _labelled("counter", "events_in_total", "Events queued, by source", "source",
                  dict(q.accepted)),
        _labelled("counter", "events_dropped_total", "Events dropped, by reason", "reason",
                  {"queue_full": q.dropped}),
        _one("counter", "removals_salvaged_total", "Dropped removal and clear events applied "
             "all the same (folded, ahead of the next batch)", q.salvage.salvaged),
        _one("counter", "nodes_cleared_for_space_total", "Nodes cleared because the dropped "
             "removals kept for them overflowed", q.salvage.cleared_for_space),
        _labelled("counter", "feature_bad_input_total", "Events the feature state refused",
                  "reason", bad),
        _one("counter", "events_applied_total", "Events applied to the feature state", k.applied),
        _one("counter", "events_restamped_total", "Events re-stamped to keep time order",
             k.restamped),
        _one("gauge", "queue_events", "Events waiting in the queue", len(q)),
        _one("gauge", "queue_capacity_events", "Bound of the queue", q.capacity),
        _one("gauge", "queue_peak_events", "Most events queued at once", q.peak),
        _one("gauge", "candidate_chains", "Recent chains kept", len(sc.chains)),
        _one("gauge", "tracked_blocks", "Blocks the feature state tracks", len(sc.state.blocks)),
        _one("counter", "shed_blocks_total", "Blocks forgotten at max_tracked_blocks",
             sc.state.blocks.shed_blocks),
        _one("gauge", "tracked_sessions", "Sessions the feature state tracks",
             len(sc.state.sessions)),
        _one("counter", "shed_sessions_total", "Sessions forgotten at max_tracked_sessions",
             sc.state.sessions.shed),
        *subscriber_families(sc),
        _one("counter", "ticks_total", "Decision ticks run", loop.ticks),
        _one("counter", "tick_errors_total", "Decision ticks that failed", loop.errors),
        _labelled("counter", "ticks_skipped_total", "Ticks that scored nothing", "reason",
                  dict(loop.skipped)),
        _labelled("counter", "decisions_total", "Decisions made, by kind", "kind",
                  dict(loop.decisions)),
        _labelled("counter", "decider_refusals_total", "Decisions a budget refused", "budget",
                  dict(sc.decider.refused)),
        _one("counter", "decider_copies_settled_total", "Copies whose fate the decider learnt",
             sc.decider.feedback.settled),
        _one("counter", "decider_copies_used_total", "Of those, routed to the copy's node",
             sc.decider.feedback.used),
        _one("gauge", "decider_p_factor", "P(hit) correction from the copies' outcomes",
             sc.decider.feedback.last_factor),
        _one("counter", "replications_issued_total", "Replications sent to agents", ex.issued),
        _one("counter", "replications_done_total", "Replications the agents completed", ex.done),
        _labelled("counter", "replications_failed_total", "Failed attempts, by reason", "reason",
                  dict(ex.failed)),
        _one("counter", "replications_retried_total", "Retried from another holder", ex.retried),
        _labelled("counter", "replica_claims_total", "Replicas held on their agent for a routed "
                  "request, released when its engine stored them, or failed or dropped "
                  "(by kind)", "outcome", dict(ex.claims)),
        _labelled("counter", "commands_dropped_total", "Commands given up, by reason", "reason",
                  dict(ex.dropped)),
        _one("counter", "replicated_bytes_total", "Bytes the agents copied", ex.moved_bytes),
        _one("counter", "evictions_issued_total", "Evict commands sent", ex.evictions),
        _one("counter", "evicted_blocks_total", "Replicas the agents evicted", ex.evicted_blocks),
        _one("counter", "replicas_placed_total", "Speculative replicas placed", rep.placed),
        _one("counter", "replicas_used_total", "Replicas a request then used", rep.used),
        _one("counter", "replicas_wasted_total", "Replicas gone unused", rep.wasted),
        _one("gauge", "replica_hit_rate", "used / (used + wasted)", rep.hit_rate),
        _one("gauge", "replicas_live", "Replicas placed and not yet gone", len(rep)),
        _one("counter", "replicas_lost_on_agents_total", "Replicas an agent removed without "
             "the sidecar's command (evicted for room, expired, or evicted by a tenant token) "
             "before the sidecar's TTL",
             sc.replicas_lost_on_agents),
        _one("counter", "agent_removals_read_total", "Blocks the agents reported removing "
             "without the sidecar's command (on their own, or on a tenant token's)",
             sc.poller.removals_read),
        _one("counter", "agent_removals_missed_total", "Removals an agent no longer held when "
             "asked (its log overflowed between polls)", sc.poller.removals_missed),
        _labelled("gauge", "agent_up", "1 when the node's agent answers", "node",
                  {n: float(up) for n, up in zip(names, sc.loads.agent_up, strict=True)}),
        _labelled("counter", "telemetry_failures_total", "Agent polls that failed", "node",
                  {names[i]: float(c) for i, c in sc.poller.failures.items()}),
        _labelled("counter", "agent_restarts_total", "Agent restarts seen (a new incarnation)",
                  "node", {names[i]: float(c) for i, c in sc.poller.restarts.items()}),
        _one("counter", "auth_failures_total", "Requests refused for a bad token",
             sc.auth_failures),
        sc.http_cuts.family(P),
        _labelled("counter", "tenant_refusals_total", "Requests refused to a tenant token: a "
                  "route it may not use, arrivals of another tenant or with a queue depth "
                  "(403), over its arrival rate or its queue share (429), its burst or its "
                  "whole share (400)", "reason",
                  dict(sc.tenant_refusals)),
        _one("counter", "ingest_refusals_total", "Requests of the ingest token refused (403): "
             "a route other than POST /v1/requests and /v1/kv-events", sc.ingest_refusals),
        _one("counter", "duplicate_arrivals_total", "Arrivals posted again (a retried batch): "
             "not counted twice", sc.seen_requests.duplicates),
        _one("gauge", "recovered_block_locations", "Block locations read from the agents at "
             "start", sc.recovery.blocks),
        _one("gauge", "recovered_replicas", "Speculative replicas of those", sc.recovery.replicas),
        _one("gauge", "recovered_claimed_replicas", "Replicas of those their agents held for "
             "routed requests: claimed again", sc.recovery.claimed),
        _one("gauge", "recovery_seconds", "Time the recovery at start took", sc.recovery.seconds),
        _one("counter", "decision_log_rows_total", "Decision log rows written",
             sc.decision_log.written if sc.decision_log else 0),
        _one("counter", "decision_log_rows_lost_total", "Decision log rows dropped: the file "
             "could not be written", sc.decision_log.lost if sc.decision_log else 0),
        _one("counter", "routes_log_rows_total", "Routes log rows written (routed requests)",
             sc.routes_log.written if sc.routes_log else 0),
        _one("counter", "routes_log_rows_lost_total", "Routes log rows dropped: the file could "
             "not be written, or too many awaited a tick",
             sc.routes_log.lost + sc.routes_log.dropped if sc.routes_log else 0),
    ]  # fmt: skip


def sidecar_registry(sc: Sidecar) -> CollectorRegistry:
    return live_registry(lambda: sidecar_families(sc))
