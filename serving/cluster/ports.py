"""Loopback addresses for a local cluster: free ports, and a check that nothing leaves the host.

``kvcast cluster`` binds and connects on ``127.0.0.1`` only. Agents and the sidecar bind port 0
and report the port they got; the engines' ZMQ endpoints must be known before the sidecar
starts (it connects to them), so their ports are reserved here: bound together (so they are
distinct), then released for the engine player to bind. They are drawn from outside the
kernel's ephemeral range (``net.ipv4.ip_local_port_range``) when it leaves room, so that no
port-0 bind and no outgoing connection (the sidecar, the agents, anything else on the host) is
ever handed one of them meanwhile; only a process binding that very port explicitly can take
it, and the engine player then fails with the address in its message.
"""

from __future__ import annotations

import contextlib
import ipaddress
import random
import socket
from pathlib import Path
from urllib.parse import urlsplit

LOOPBACK = "127.0.0.1"
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
IANA_EPHEMERAL = (49152, 65535)  # where the file is absent (macOS, BSD use this range)
FIRST_UNPRIVILEGED = 1024


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The ports the kernel hands out for port-0 binds and outgoing connections, inclusive."""
    try:
        low, high = (int(x) for x in path.read_text().split())
    except (OSError, ValueError):
        return IANA_EPHEMERAL
    return low, high


def reserved_candidates(ephemeral: tuple[int, int]) -> list[int]:
    """Unprivileged ports outside ``ephemeral`` (empty when it covers them all)."""
    low, high = ephemeral
    return [*range(FIRST_UNPRIVILEGED, max(low, FIRST_UNPRIVILEGED)), *range(high + 1, 65536)]


def free_ports(
    count: int, host: str = LOOPBACK, *, outside_ephemeral: bool = False,
    ephemeral: tuple[int, int] | None = None, rng: random.Random | None = None,
) -> list[int]:  # fmt: skip
    """``count`` distinct TCP ports free on ``host`` right now. ``outside_ephemeral``: drawn at
    random from the unprivileged ports outside the kernel's ephemeral range (``ephemeral``,
    read from the system by default), then from port 0 for any not found there in a few
    tries per port (a host whose ephemeral range covers every port)."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    outside = reserved_candidates(ephemeral or ephemeral_range()) if outside_ephemeral else []
    rng = rng or random.Random()
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        tries = 8 * count if outside else 0
        while len(ports) < count:
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            port = 0
            if tries > 0:
                tries -= 1
                port = rng.choice(outside)
            try:
                sock.bind((host, port))
            except OSError:
                if port == 0:
                    raise
                continue  # taken: draw another
            ports.append(sock.getsockname()[1])
        return ports


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an IP literal) is this machine's loopback."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_loopback(address: str, what: str) -> str:
    """``address`` (``http://H:P``, ``tcp://H:P`` or ``H:P``) if its host is loopback, else a
    ValueError naming ``what``; trailing slashes are dropped."""
    text = address.strip().rstrip("/")
    try:
        parts = urlsplit(text if "://" in text else f"//{text}")
        host, port = parts.hostname or "", parts.port
    except ValueError:  # a port that is not a number, or out of range
        host, port = "", None
    if not host or port is None:
        raise ValueError(f"{what}: {address!r} is not an address (give http://127.0.0.1:PORT)")
    if not is_loopback(host):
        raise ValueError(f"{what}: {address!r} is not a loopback address (127.0.0.1)")
    return text


def tcp_endpoint(port: int, host: str = LOOPBACK) -> str:
    """A ZMQ TCP endpoint on ``host``."""
    return f"tcp://{host}:{port}"
