"""Loopback addresses for a local cluster: free ports, and a check that nothing leaves the host.

``kvcast cluster`` binds and connects on ``127.0.0.1`` only. Agents and the sidecar bind port 0
and report the port they got; the engines' ZMQ endpoints must be known before the sidecar
starts (it connects to them), so their ports are reserved here: bound together (so they are
distinct), then released for the engine player to bind. Another process could take one in
between; the engine player then fails with the address in its message.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from urllib.parse import urlsplit

LOOPBACK = "127.0.0.1"


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """``count`` distinct TCP ports free on ``host`` right now."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
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
    host = urlsplit(text if "://" in text else f"//{text}").hostname or ""
    if not is_loopback(host):
        raise ValueError(f"{what}: {address!r} is not a loopback address (127.0.0.1)")
    return text


def tcp_endpoint(port: int, host: str = LOOPBACK) -> str:
    """A ZMQ TCP endpoint on ``host``."""
    return f"tcp://{host}:{port}"
