"""Untrusted bytes never crash the vLLM event decoder or the agents' frame decoder."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from kvcast.serving import messages as msg

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "fuzz"))
from run import fuzz
from targets import TARGETS, Target


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_twenty_thousand_mutated_inputs_only_ever_raise_the_documented_error(name: str) -> None:
    report = fuzz(TARGETS[name], 20_000, seed=7)
    assert report["crashed"] == 0, report["crashes"]
    assert report["accepted"] > 0 and report["rejected"] > 0  # both paths were exercised
    assert report["slowest_input_ms"] < 1_000  # no input hangs the decoder


def test_the_fuzzer_reports_an_unexpected_exception_as_a_crash() -> None:
    def fragile(data: bytes) -> None:
        if len(data) > 10:
            raise TypeError("decoder bug")

    target = Target("fragile", fragile, ValueError, TARGETS["agent_frames"].seeds)
    report = fuzz(target, 200, seed=1)
    assert report["crashed"] > 0 and "TypeError" in report["crashes"][0]["error"]


def test_the_agent_frame_seeds_hold_every_message_type_and_a_version_1_refusal() -> None:
    """Mutations start from every frame a connection may carry (its Hello first) and from the
    version-1 Error a source refuses an old puller with, so that the fuzzer reaches each body
    decoder and the version check."""
    decoded, other_versions = set(), []
    for seed in TARGETS["agent_frames"].seeds(random.Random(0)):
        try:
            decoded.add(type(msg.decode(seed)))
        except msg.VersionMismatch as err:
            other_versions.append(err.version)
    assert decoded == {msg.Hello, msg.PullRequest, msg.BlockHeader, msg.Done, msg.Error}
    assert other_versions == [1]
