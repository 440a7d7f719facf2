"""The kinds of timed event on the simulator's heap (the third field of each entry), shared by
the event loop (:mod:`kvcast.simulator.engine`) and its replication hooks
(:mod:`kvcast.simulator.replication_hooks`). Entries are ordered by time, then by push order;
the kind only selects the handler."""

ITER, DECODE, PULL, REPL, PROMOTE, TELEM, TICK = range(7)
