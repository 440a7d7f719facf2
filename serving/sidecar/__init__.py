"""The router sidecar: beside the router, it turns arrivals and engine KV events into
replication commands for the agents (``kvcast serve sidecar``).

Walk of one decision: the router posts an arrival (``POST /v1/requests``, :mod:`.api`,
:mod:`.translate`; its node goes to the :mod:`.routes_log` too) and the engines publish vLLM KV
events over ZMQ (:mod:`.zmq_ingest`, one thread per engine); both land in the bounded
:mod:`.event_queue`. The single consumer (:mod:`.consumer`) applies them in order to the
:class:`FeatureState` and keeps the recent prefix chains (:mod:`.recent_chains`). On every tick
the decision loop (:mod:`.decision_loop`) takes a snapshot on the consumer thread
(:mod:`.tick_input`: candidate chains, their feature rows, who holds each block), scores it
with the hot-swappable ONNX model (:mod:`.model_slot`), builds the decider's cluster view from
agent telemetry and the link config (:mod:`.live_view`, :mod:`.node_loads`,
:mod:`.telemetry_poller`) and runs the decider. Each command is a :mod:`.decisions` record:
kept for ``GET /v1/decisions``, written to the Parquet :mod:`.decision_log` (both logs:
:mod:`.parquet_parts`), and in active mode sent to the agents by the :mod:`.executor`, which
feeds the outcome back into the event stream and the replica hit rate (:mod:`.replicas`). At
start, before the first tick, :mod:`.recovery` rebuilds where every block lives from the
agents' inventories (the engines' replay sockets give their recent history), so a restarted
sidecar sends no transfer twice. :mod:`.core` wires the parts, :mod:`.service` runs them with
the HTTP server, :mod:`.metrics` exposes them to Prometheus. Beside the shared token, tenant
tokens (:mod:`.tenant_tokens`) post and see their tenants' arrivals, decisions and blocks
only (:mod:`.tenant_scope`; whose blocks: :mod:`.block_tenants`), and the ingest token (the
router's and the engines') posts arrivals and KV events only
(:mod:`kvcast.serving.http.ingest_token`).

Nothing here imports torch; the serving path is numpy, onnxruntime, pyzmq, FastAPI and httpx.
"""
