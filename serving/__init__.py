"""Serving: router sidecar and KV transfer agent (see the README roadmap)."""
