"""A Dask client for the scale-out paths (features, LightGBM): an existing cluster by its
scheduler address, or a throwaway local cluster of single-threaded worker processes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

SCHEMES = ("tcp", "tls", "inproc", "ucx", "ws", "wss")  # distributed's comm protocols


def check_scheduler(scheduler: str, what: str = "--scheduler") -> str:
    """``scheduler`` if it is ``local`` or an address a Dask client can dial
    (``tcp://host:port``, ``host:port`` for tcp, or another of distributed's protocols); else
    a ValueError naming ``what``, before any work that would need it."""
    if scheduler == "local":
        return scheduler
    scheme, sep, rest = scheduler.partition("://")
    if not sep:
        scheme, rest = "tcp", scheduler
    if scheme == "inproc" and rest:  # an in-process cluster's own address (no port)
        return scheduler
    host, colon, port = rest.rpartition(":")
    if scheme not in SCHEMES or not colon or not host or not port.isdigit():
        raise ValueError(
            f"{what}: {scheduler!r} is not a Dask scheduler address: give local, or "
            f"PROTOCOL://HOST:PORT ({'/'.join(SCHEMES)}), e.g. tcp://scheduler:8786"
        )
    if not 0 < int(port) < 65536:
        raise ValueError(f"{what}: port {port} of {scheduler!r} is out of range (1-65535)")
    return scheduler


@contextmanager
def dask_client(scheduler: str = "local", workers: int = 2) -> Iterator[Any]:
    """A client of the cluster at ``scheduler`` (``tcp://host:port``), or of a new local
    cluster of ``workers`` single-threaded processes (``"local"``), closed on exit."""
    from distributed import Client, LocalCluster

    if scheduler == "local":
        if workers < 1:  # a cluster without workers runs nothing: every task would wait
            raise ValueError(f"a local Dask cluster needs at least 1 worker, got {workers}")
        with (
            LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            Client(cluster) as client,
        ):
            yield client
        return
    try:
        client = Client(scheduler, timeout="5s")
    except OSError as e:
        raise ValueError(f"cannot reach the Dask scheduler {scheduler!r}: {e}") from None
    with client:
        yield client


def worker_addresses(client: Any) -> list[str]:
    """Every worker of ``client``'s cluster, sorted. ``scheduler_info()`` lists only the first
    five by default in distributed 2025.5 to 2026.6; ``n_workers=-1`` asks for all of them
    (older releases, which have no such argument, list all anyway)."""
    try:
        info = client.scheduler_info(n_workers=-1)
    except TypeError:
        info = client.scheduler_info()
    return sorted(info.get("workers", {}))
