"""A server's connection cap is reachable: the soft open-file limit is raised to the cap plus a
reserve (up to the hard limit), with a warning when the hard limit is lower (run in a child
process, whose limits the test may lower for good)."""

from __future__ import annotations

import resource
import subprocess
import sys

import pytest

from kvcast.serving.http.open_files import RESERVE

CHILD = """
import logging, resource, sys
from kvcast.serving.http.open_files import ensure_open_files
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
soft, hard = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
print("returned", ensure_open_files(int(sys.argv[3])))
print("soft", resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def _child(soft: int, hard: int, connections: int) -> tuple[dict[str, int], str]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(soft), str(hard), str(connections)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    figures = dict(line.split() for line in out.stdout.splitlines())
    return {k: int(v) for k, v in figures.items()}, out.stderr


HARD = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
needs_headroom = pytest.mark.skipif(
    HARD != resource.RLIM_INFINITY and HARD < 2048, reason=f"hard open-file limit {HARD}"
)


@needs_headroom
def test_a_soft_limit_below_the_cap_is_raised_to_the_cap_plus_the_reserve() -> None:
    hard = 2048 if HARD == resource.RLIM_INFINITY else HARD
    figures, stderr = _child(256, hard, 1024)
    assert figures == {"returned": 1024 + RESERVE, "soft": 1024 + RESERVE}
    assert "WARNING" not in stderr


def test_a_hard_limit_below_the_cap_is_used_and_warned_about() -> None:
    figures, stderr = _child(128, 512, 1024)
    assert figures == {"returned": 512, "soft": 512}
    assert "open-file limit (512) is below the 1280" in stderr and "max_connections" in stderr


def test_a_soft_limit_already_enough_is_left_alone() -> None:
    figures, stderr = _child(512, 512, 100)
    assert figures == {"returned": 512, "soft": 512} and stderr == ""
