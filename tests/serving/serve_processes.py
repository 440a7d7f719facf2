"""Real ``kvcast`` processes for the serving tests (``serve agent``, ``serve sidecar``,
``cluster up``): started on loopback with port 0, ready once their ready line (which carries
the bound addresses) is logged."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

AGENT_READY = re.compile(r"agent (\S+) ready: http=http://(\S+) transfer=(\S+)")
SIDECAR_READY = re.compile(r"sidecar (\S+) ready: http=http://(\S+) ")


@dataclass
class Service:
    proc: subprocess.Popen[str]
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    log: list[str] = field(default_factory=list)
    pump: threading.Thread | None = None
    http: str = ""

    def wait_ready(self, pattern: re.Pattern[str], timeout_s: float = 30.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if match := pattern.search(line):
                if pattern.groups >= 2:  # the service patterns below: group 2 is the HTTP address
                    self.http = f"http://{match.group(2)}"
                return match
        raise AssertionError(f"not ready in {timeout_s} s:\n" + "".join(self.log))

    def stop(self, sig: int, timeout_s: float = 15.0) -> int:
        """Send ``sig`` once, then :meth:`wait`."""
        self.proc.send_signal(sig)
        return self.wait(timeout_s)

    def wait(self, timeout_s: float = 15.0) -> int:
        """The exit status once the process and its output have ended."""
        status = self.proc.wait(timeout=timeout_s)
        if self.pump is not None:
            self.pump.join(timeout=timeout_s)
        return status

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)

    def full_gc_collections(self, pattern: re.Pattern[str], prefix: str,
                            wait_s: float) -> dict[str, float]:  # fmt: skip
        """Once ready, ``wait_s`` later: the full GC collections on its ``/metrics``
        (``{prefix}gc_pause_seconds``), by kind; then stopped (SIGINT, exit 0), or killed."""
        import httpx

        from kvcast.serving.cluster.summary import parse_metrics

        try:
            self.wait_ready(pattern)
            time.sleep(wait_s)
            with httpx.Client(base_url=self.http, timeout=10.0) as http:
                metrics = parse_metrics(http.get("/metrics").text)
            assert self.stop(signal.SIGINT) == 0, "".join(self.log)
        finally:
            self.kill()
        key = prefix + "gc_pause_seconds_count{generation=2,kind=%s}"  # as parse_metrics keys it
        return {kind: metrics.get(key % kind, 0.0) for kind in ("auto", "paced", "thaw")}


def kvcast_command() -> list[str]:
    script = Path(sys.executable).with_name("kvcast")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from kvcast.cli.app import main; main()"]


def start(args: list[str], env: dict[str, str]) -> Service:
    proc = subprocess.Popen(
        [*kvcast_command(), *args], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    service = Service(proc)

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            service.log.append(line)
            service.lines.put(line)

    service.pump = threading.Thread(target=pump, daemon=True)
    service.pump.start()
    return service


def start_agent(node_id: str, env: dict[str, str], *extra: str) -> Service:
    """``kvcast serve agent`` on loopback (64 MiB, 16 MiB speculative); ``extra`` flags after
    (a flag given twice takes its last value)."""
    return start(
        ["serve", "agent", "--node-id", node_id, "--listen", "127.0.0.1:0",
         "--transfer-listen", "127.0.0.1:0", "--capacity", "64MiB",
         "--speculative-quota", "16MiB", *extra],
        env,
    )  # fmt: skip
