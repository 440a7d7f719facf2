"""kvcast: predict per-block KV bursts and replicate ahead of them."""

__version__ = "0.1.0"
