"""One supervised child process (``kvcast serve agent`` / ``kvcast serve sidecar``).

The child runs in a session of its own, so a Ctrl-C in the terminal reaches only the
supervisor, which then stops every child in order. On Linux the child also gets SIGTERM
should the supervisor die without stopping it (``PR_SET_PDEATHSIG``), so a killed supervisor
leaves no orphan behind. A thread copies the child's output (stdout and stderr together) into
its log file and watches for its ready line, which carries the addresses it bound.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

PR_SET_PDEATHSIG = 1
AGENT_READY = re.compile(r"agent (\S+) ready: http=https?://(\S+) transfer=(\S+)")
SIDECAR_READY = re.compile(r"sidecar (\S+) ready: http=https?://(\S+) ")


class ServiceFailed(RuntimeError):
    """A child exited, or did not become ready in time; the message ends with its last lines."""


class StartAborted(Exception):
    """Asked to stop (``abort`` set) while waiting for a child to be ready."""


def kvcast_command() -> list[str]:
    """How to run this installation's ``kvcast`` (its script beside the interpreter)."""
    script = Path(sys.executable).with_name("kvcast")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from kvcast.cli.app import main; main()"]


def _death_signal() -> Callable[[], None] | None:
    """A pre-exec hook asking the kernel to SIGTERM the child when its parent dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    term = int(signal.SIGTERM)
    return lambda: prctl(PR_SET_PDEATHSIG, term)  # resolved now: the child only calls it


class ServiceProcess:
    """``args`` run as ``name`` with ``env``, output to ``log_path``; ``ready`` its ready line."""

    def __init__(
        self, name: str, args: list[str], *, env: dict[str, str], log_path: Path,
        ready: re.Pattern[str],
    ) -> None:  # fmt: skip
        self.name, self.args, self.env, self.log_path, self.ready = name, args, env, log_path, ready
        self.match: re.Match[str] | None = None
        self.tail: deque[str] = deque(maxlen=30)
        self._ready = threading.Event()
        self._proc: subprocess.Popen[str] | None = None
        self._pump: threading.Thread | None = None
        self._terminated = False
        self._pump_done = False

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(
            self.args, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
            preexec_fn=_death_signal(),  # one prctl call, resolved in the parent
        )  # fmt: skip
        self._pump = threading.Thread(target=self._copy, name=f"log-{self.name}", daemon=True)
        self._pump.start()

    def _copy(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        with self.log_path.open("a", encoding="utf-8") as log:
            for line in self._proc.stdout:
                log.write(line)
                log.flush()
                self.tail.append(line.rstrip())
                if self.match is None and (m := self.ready.search(line)):
                    self.match = m
                    self._ready.set()
        self._pump_done = True
        self._ready.set()  # the output ended: wake a waiter either way

    @property
    def pid(self) -> int:
        assert self._proc is not None, "not started"
        return self._proc.pid

    def returncode(self) -> int | None:
        """The exit status, None while it runs (or before it started)."""
        return None if self._proc is None else self._proc.poll()

    def failure(self, what: str) -> ServiceFailed:
        lines = "\n".join(f"  | {x}" for x in self.tail)
        return ServiceFailed(f"{self.name} {what} (log: {self.log_path})\n{lines}".rstrip())

    def wait_ready(self, timeout_s: float, abort: threading.Event | None = None) -> re.Match[str]:
        """The ready line's match; :class:`ServiceFailed` if the child exits or times out,
        :class:`StartAborted` as soon as ``abort`` is set."""
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.05) and time.monotonic() < deadline:
            if abort is not None and abort.is_set():
                raise StartAborted(f"stopped while {self.name} was starting")
        if self.match is not None:
            return self.match
        code = self.wait(5.0) if self._pump_done else self.returncode()  # output over: exiting
        if code is None:
            raise self.failure(f"not ready within {timeout_s:g} s")
        raise self.failure(f"exited with status {code} before it was ready")

    def signal(self, sig: int) -> None:
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.send_signal(sig)

    def terminate(self) -> None:
        """SIGTERM, once: a second one could land after the child's own handler is gone."""
        if not self._terminated:
            self._terminated = True
            self.signal(signal.SIGTERM)

    def wait(self, timeout_s: float) -> int | None:
        """The exit status once it ended (None: still running after ``timeout_s``)."""
        if self._proc is None:
            return None
        try:
            code = self._proc.wait(timeout=max(timeout_s, 0.0))
        except subprocess.TimeoutExpired:
            return None
        if self._pump is not None:
            self._pump.join(timeout=5.0)
        return code

    def stop(self, grace_s: float, deadline: float | None = None) -> int | None:
        """SIGTERM, then SIGKILL after ``grace_s``; the exit status (reaped: never a zombie)."""
        if self._proc is None:
            return None
        self.terminate()
        left = grace_s if deadline is None else max(deadline - time.monotonic(), 0.0)
        code = self.wait(left)
        if code is None:
            self.signal(signal.SIGKILL)
            code = self.wait(10.0)
        return code
