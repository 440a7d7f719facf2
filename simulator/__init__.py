"""Trace-replay discrete-event cluster simulator."""
