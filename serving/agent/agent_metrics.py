"""The agent's Prometheus metrics, read at scrape time from the counters its parts keep.

Names start with ``kvcast_agent_``. Command counts come from the HTTP layer (received,
refused by reason), pull outcomes from the transfer client, served bytes from the transfer
server and state totals from the block store, so ``/metrics`` never disagrees with them.
"""

from __future__ import annotations

from kvcast.serving.agent.blocks import BlockState
from kvcast.serving.agent.control import AgentControl
from kvcast.serving.agent.host_pool import HostBlockPool
from kvcast.serving.http.metrics import Family, refusal_reason

COMMAND_PATHS = {
    "/v1/replicate": "replicate",
    "/v1/evict": "evict",
    "/v1/pin": "pin",
    "/v1/unpin": "unpin",
    "/v1/hold": "hold",
    "/v1/release": "release",
    "/v1/engine-stats": "engine_stats",
    "/v1/blocks": "put_block",
}
P = "kvcast_agent_"


def _counter(name: str, doc: str, value: float) -> Family:
    return Family("counter", P + name, doc).add(value)


def _gauge(name: str, doc: str, value: float) -> Family:
    return Family("gauge", P + name, doc).add(value)


def command_families(control: AgentControl) -> list[Family]:
    received = Family("counter", P + "commands_received_total", "Commands received", ("command",))
    refused = Family(
        "counter", P + "commands_refused_total", "Commands refused", ("command", "reason")
    )
    failed = Family(
        "counter", P + "commands_failed_total", "Commands run that failed", ("command", "outcome")
    )
    per_command: dict[str, int] = dict.fromkeys(COMMAND_PATHS.values(), 0)
    reasons: dict[tuple[str, str], int] = {}
    for (path, status), n in control.requests.items():
        command = COMMAND_PATHS[path]
        per_command[command] += n
        if (reason := refusal_reason(status)) is not None:
            reasons[(command, reason)] = reasons.get((command, reason), 0) + n
    for command, n in per_command.items():
        received.add(n, command)
    for (command, reason), n in sorted(reasons.items()):
        refused.add(n, command, reason)
    for (command, outcome), n in sorted(control.failed.items()):
        failed.add(n, command, outcome)
    return [received, refused, failed]


def agent_families(control: AgentControl) -> list[Family]:
    """Every metric of the agent behind ``control``, as of now."""
    agent = control.agent
    client, server, store = agent.client.stats, agent.server.stats, agent.store
    auth = Family("counter", P + "auth_failures_total", "Requests refused for a bad token",
                  ("surface",))  # fmt: skip
    auth.add(control.http_auth_failures, "http").add(server.auth_refused, "transfer")
    totals = store.totals()
    by_bytes = Family("gauge", P + "store_bytes", "Bytes held, by block state", ("state",))
    by_count = Family("gauge", P + "store_blocks", "Blocks held, by block state", ("state",))
    for state in BlockState:
        by_count.add(totals[state][0], state.value)
        by_bytes.add(totals[state][1], state.value)
    removals = Family("counter", P + "store_removals_total", "Blocks removed", ("reason",))
    for reason in ("evicted_cached", "evicted_speculative", "expired", "removed"):
        removals.add(getattr(store.stats, reason), reason)
    holds = Family("counter", P + "store_holds_total",
                   "Replicas held for a routed request, and held ones evicted for room all the "
                   "same", ("event",))  # fmt: skip
    holds.add(store.stats.holds, "held").add(store.stats.held_evicted, "evicted")
    rejections = Family(
        "counter", P + "store_rejections_total", "Blocks refused by the store", ("reason",)
    )
    rejections.add(store.stats.rejected_checksum, "checksum")
    rejections.add(store.stats.rejected_quota, "quota").add(store.stats.rejected_capacity, "full")
    rejections.add(store.stats.rejected_tenant_cap, "tenant_cap")
    info = Family("gauge", P + "info", "This agent", ("node_id",)).add(1, control.node_id)
    tenant = Family("counter", P + "http_tenant_refusals_total",
                    "HTTP requests of a tenant token refused (403): a route it may not use, "
                    "another tenant's blocks, an active upload", ("reason",))  # fmt: skip
    for reason in ("route", "tenant", "state"):
        tenant.add(control.tenant_refusals[reason], reason)
    engines = control.engines()
    return [
        info,
        holds,
        *command_families(control),
        _counter("replicate_duplicates_total", "Repeated command ids (nothing moved)",
                 agent.client.commands.duplicates),
        auth,
        control.http_cuts.family(P),
        _counter("pulls_total", "Pull commands run", client.pulls),
        _counter("pull_attempts_total", "Pull attempts (retries included)", client.attempts),
        _counter("pull_retries_total", "Pull retries", client.retries),
        _counter("blocks_pulled_total", "Blocks pulled, verified and stored",
                 client.blocks_committed),
        _counter("bytes_pulled_total", "Bytes pulled, verified and stored",
                 client.bytes_committed),
        _counter("bytes_pulled_already_held_total",
                 "Bytes pulled and verified, of blocks another command stored meanwhile",
                 client.bytes_already_held),
        _counter("checksum_failures_total", "Pulled blocks that failed their checksum",
                 client.checksum_failures),
        _counter("deadline_cancellations_total", "Pulls cancelled at their deadline",
                 client.deadline_exceeded),
        _counter("pulls_refused_total", "Pulls refused by the source", client.refused),
        _counter("blocks_served_total", "Blocks sent to pulling peers", server.blocks_sent),
        _counter("bytes_served_total", "Bytes sent to pulling peers", server.bytes_sent),
        _counter("transfer_bad_requests_total", "Malformed transfer requests",
                 server.bad_requests),
        _counter("transfer_busy_refusals_total",
                 "Peer connections refused: max_transfer_connections being served",
                 server.busy_refused),
        _counter("transfer_hellos_dropped_total",
                 "Peer connections closed before their Hello: max_transfer_hellos newer ones",
                 server.hellos_dropped),
        _counter("transfer_stalled_peers_total",
                 "Pulls cut off: the peer took no bytes for request_timeout_s", server.stalled),
        _counter("transfer_version_refusals_total",
                 "Peer connections refused: another transfer protocol version",
                 server.version_refused),
        _counter("transfer_tenant_refusals_total",
                 "Pulls refused: a tenant token asked for blocks of a tenant it does not "
                 "speak for", server.tenant_refused),
        _counter("transfer_tenant_busy_refusals_total",
                 "Pulls refused: a tenant token had its max_pulls being served",
                 server.tenant_busy_refused),
        tenant,
        _counter("http_ingest_refusals_total",
                 "HTTP requests of the ingest token refused (403): a route other than "
                 "POST /v1/engine-stats", control.ingest_refusals),
        _counter("http_tenant_rate_limited_total",
                 "HTTP requests refused (429): a tenant token over its max_requests_per_s",
                 control.http_rate_limited),
        _gauge("transfer_connections", "Peers being served", agent.server.connections),
        by_bytes,
        by_count,
        removals,
        rejections,
        _gauge("capacity_bytes", "Block store capacity", store.capacity_bytes),
        _gauge("speculative_quota_bytes", "Speculative replica quota",
               store.speculative_quota_bytes),
        _gauge("peak_used_bytes", "Highest bytes held", store.stats.peak_used_bytes),
        _gauge("peak_speculative_bytes", "Highest speculative bytes held",
               store.stats.peak_speculative_bytes),
        _gauge("replications_in_flight", "Replicate commands running",
               control.replications_in_flight),
        *([_gauge("engine_queue_depth", "Queue depth the engines last reported",
                  sum(e.queue_depth for e in engines))] if engines else []),
        *pool_families(agent.client.allocator),
    ]  # fmt: skip


def pool_families(allocator: object) -> list[Family]:
    """Slots of the preallocated receive pool, when the agent has one (a buffer that never
    returns to the pool after a failed pull shows here as a free slot missing)."""
    if not isinstance(allocator, HostBlockPool):
        return []
    return [
        _gauge("pool_slots", "Slots of the receive pool", allocator.slots),
        _gauge("pool_free_slots", "Slots of the receive pool not holding a block",
               allocator.free_slots),
        _counter("pool_fallbacks_total", "Blocks received outside the pool", allocator.fallbacks),
    ]  # fmt: skip
