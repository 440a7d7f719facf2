"""vLLM KV-cache events: wire decoding/encoding, a ZMQ subscriber and a stand-in publisher.

The codec (``decode``, ``encode``) needs only msgspec, so offline tools can read captured
payloads without pyzmq; the socket classes load pyzmq on first use. Both come with the
``serve`` extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .decode import DecodedBatch, KvEvent, KvEventDecodeError, decode_batch, hash_from_wire
from .encode import encode_batch, hash_to_wire

if TYPE_CHECKING:
    from .publisher import KvEventPublisher
    from .subscriber import KvEventSubscriber, KvSubscriberCounters

_LAZY = {
    "KvEventPublisher": "publisher",
    "KvEventSubscriber": "subscriber",
    "KvSubscriberCounters": "subscriber",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DecodedBatch",
    "KvEvent",
    "KvEventDecodeError",
    "KvEventPublisher",
    "KvEventSubscriber",
    "KvSubscriberCounters",
    "decode_batch",
    "encode_batch",
    "hash_from_wire",
    "hash_to_wire",
]
