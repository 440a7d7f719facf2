"""A log writer killed by SIGKILL in the middle of a part: the sidecar's crash, for the
decision log's and the routes log's tests alike."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def kill_mid_part(child: str, first: Path, open_part: Path) -> None:
    """Run ``child`` (Python source that writes the log at ``first``, prints ``2 10`` (two
    parts closed, ten rows written) and sleeps), then SIGKILL it while ``open_part`` holds
    rows but no footer."""
    proc = subprocess.Popen([sys.executable, "-c", child, str(first)], stdout=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().split() == ["2", "10"]
        assert open_part.stat().st_size > 4  # rows written to it, the footer not yet
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
