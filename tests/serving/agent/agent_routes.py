"""The agent's guarded HTTP routes, as (method, path): what a request without the shared token
is refused (``DATA_ROUTES``, the block upload apart: its tests send bodies of their own)."""

from __future__ import annotations

DATA_ROUTES = [
    ("POST", "/v1/replicate"),
    ("POST", "/v1/evict"),
    ("POST", "/v1/pin"),
    ("POST", "/v1/unpin"),
    ("POST", "/v1/hold"),
    ("POST", "/v1/release"),
    ("POST", "/v1/engine-stats"),
    ("GET", "/v1/inventory"),
    ("GET", "/v1/removals"),
]
UPLOAD = ("PUT", "/v1/blocks")
