"""The tick input's shortcut gives exactly its plain definition, on random inputs: the lazily
made GPU holders, read through every lookup before and after they are made (``get`` then goes
straight to the dict), are the held blocks' masks. (The distinct blocks: tests/features/online/
test_chain_codes.py.)"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcast.serving.sidecar.tick_input import Holders


@settings(max_examples=300, deadline=None)
@given(
    masks=st.dictionaries(st.integers(0, 50), st.integers(0, (1 << 8) - 1), max_size=30),
    probes=st.lists(st.integers(-5, 60), max_size=20),
    first=st.sampled_from(["get", "get_default", "getitem", "contains", "len", "iter"]),
)
def test_holders_read_every_way_are_the_held_blocks_masks(
    masks: dict[int, int], probes: list[int], first: str
) -> None:
    blocks = list(masks)
    holders = Holders(blocks, np.array([masks[b] for b in blocks], dtype=np.int64))
    held = {b: m for b, m in masks.items() if m}
    reads = {
        "get": lambda: [holders.get(p) for p in probes],
        "get_default": lambda: [holders.get(p, 0) for p in probes],
        "getitem": lambda: [holders[p] for p in probes if p in held],
        "contains": lambda: [p in holders for p in probes],
        "len": lambda: len(holders),
        "iter": lambda: list(holders),
    }
    expect = {
        "get": [held.get(p) for p in probes],
        "get_default": [held.get(p, 0) for p in probes],
        "getitem": [held[p] for p in probes if p in held],
        "contains": [p in held for p in probes],
        "len": len(held),
        "iter": list(held),
    }
    assert reads[first]() == expect[first]  # the first read makes the dict
    for name, read in reads.items():  # then every read, ``get`` the dict's own
        assert read() == expect[name]
    assert dict(holders) == held
