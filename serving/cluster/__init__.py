"""A local cluster on loopback (``kvcast cluster up``) and a trace played against it
(``kvcast cluster replay``), so that one can watch the sidecar decide and the agents move
real bytes.

Parts, one per module: :mod:`.ports` (loopback ports and address checks), :mod:`.config_gen`
(the sidecar's and the decider's config for the cluster), :mod:`.layout` (the addresses
``cluster up`` writes to ``cluster.json``), :mod:`.certs` (the CA and certificates of
``cluster up --tls``), :mod:`.process` (one supervised child process),
:mod:`.supervisor` (the agents and the sidecar, started and stopped in order),
:mod:`.model_choice` (the default model); for the replay, :mod:`.node_model` (an engine's
prefix cache and queue, pure), :mod:`.router_player` (routing with a baseline rule, arrivals
to the sidecar), :mod:`.blocks` (a block's bytes), :mod:`.event_sinks` (vLLM KV events over
ZMQ or HTTP), :mod:`.engine_http` (a lean HTTP/1.1 client for the engine's many PUTs),
:mod:`.engine_player` (blocks into the agent, events out), :mod:`.replay` (the schedule) and
:mod:`.summary` (what the services counted).
"""
