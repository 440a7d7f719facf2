"""The process's open-file limit, raised to what an HTTP server's connection cap needs.

Each open connection holds a file descriptor, so a ``max_connections`` above the process's
soft ``RLIMIT_NOFILE`` is never reached: ``accept`` fails with "too many open files" first
(the common default soft limit, 1,024, is the default cap). :func:`ensure_open_files` raises
the soft limit up to the hard one, as servers do at start, and warns when even the hard limit
is too low.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("kvcast.serving.http")
RESERVE = 256  # descriptors besides the HTTP connections: peers' sockets, files, the loop


def ensure_open_files(connections: int) -> int:
    """Make the soft open-file limit at least ``connections + RESERVE`` (up to the hard
    limit); warn when it stays lower. Returns the soft limit now."""
    needed = connections + RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return soft
    target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as err:
            log.debug("cannot raise the open-file limit to %d: %s", target, err)
    if soft < needed:
        log.warning(
            "the open-file limit (%d) is below the %d descriptors that %d connections need: "
            "the process may run out of descriptors before http.max_connections closes "
            "connections; raise it (ulimit -n) or lower max_connections",
            soft, needed, connections,
        )  # fmt: skip
    return soft
