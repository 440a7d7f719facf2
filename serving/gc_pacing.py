"""Python's cyclic garbage collector, paced for a process with a large, long-lived heap.

CPython collects its oldest generation whenever the objects that survived into it since the
last full collection reach a quarter of it. A sidecar tracking 500,000 blocks holds a few
hundred thousand such objects (the feature state's runs, sessions and their dicts): each full
collection scans all of them, ~0.1 s with every thread stopped (the GIL), the decision tick
and ingestion with it, and the scan finds nothing, since the state holds no reference cycles
(its objects are freed by their reference counts as the state drops them).

:class:`GcPacer` keeps the young generations automatic (a few milliseconds at most) and takes
the full collection off the automatic schedule: the process runs it itself, between two
decision ticks, every ``full_every_s``, as ``gc.collect()`` then ``gc.freeze()``, so that the
next one scans only the objects made since (its pause is bounded by ``full_every_s`` of churn,
not by the heap). A frozen object is never collected, so a cycle that became garbage after
it was frozen (an abandoned connection's objects, say) would stay; every ``thaw_every`` full
collections the pacer unfreezes first, so such cycles go then, at the cost of one full scan
at that cadence. Every collection, automatic or paced, is timed by generation.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Histogram

NO_AUTOMATIC_FULL = 1 << 30  # gen1 collections before an automatic full one: never
PAUSE_BUCKETS = (1e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5)


class GcPacer:
    """Owns the process's collector settings from :meth:`start` to :meth:`stop` (which puts
    back the thresholds it found and unfreezes); times collections meanwhile, paced or not, in
    ``registry`` as ``{prefix}gc_pause_seconds``. ``clock``: monotonic seconds."""

    def __init__(
        self,
        full_every_s: float,
        thaw_every: int,
        registry: CollectorRegistry | None = None,
        prefix: str = "kvcast_",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not full_every_s > 0 or thaw_every < 1:
            raise ValueError(
                f"gc: full_every_s must be > 0 and thaw_every >= 1, got {full_every_s}, "
                f"{thaw_every}"
            )
        self.full_every_s, self.thaw_every, self.clock = full_every_s, thaw_every, clock
        self.pauses = Histogram(
            f"{prefix}gc_pause_seconds",
            "Python's cyclic GC: each collection's pause, by generation (2: full; paced ones "
            "run between decision ticks)",
            ["generation"],
            registry=registry,
            buckets=PAUSE_BUCKETS,
        )
        self.full_collections = 0  # paced full collections so far
        self._thresholds: tuple[int, int, int] | None = None  # found at start, if paced
        self._timing = False
        self._last_full = 0.0
        self._started_at = 0.0

    def start(self, paced: bool = True) -> None:
        """Time every collection from now on; ``paced``: also take the full collection off
        the automatic schedule, after one that freezes what the process holds now (its
        modules, its loaded model, its empty state)."""
        if self._timing:
            return
        gc.callbacks.append(self._timed)
        self._timing = True
        if not paced:
            return
        gc.collect()
        gc.freeze()
        t0, t1, _ = self._thresholds = gc.get_threshold()
        gc.set_threshold(t0, t1, NO_AUTOMATIC_FULL)
        self._last_full = self.clock()

    def maybe_collect(self) -> bool:
        """Run the paced full collection if it is due (call it between two ticks, on the
        decision thread); whether it ran."""
        if self._thresholds is None or self.clock() - self._last_full < self.full_every_s:
            return False
        self.full_collections += 1
        if self.full_collections % self.thaw_every == 0:
            gc.unfreeze()  # this one scans everything: cycles frozen alive, now garbage, go
        gc.collect()
        gc.freeze()
        self._last_full = self.clock()
        return True

    def stop(self) -> None:
        if self._thresholds is not None:
            gc.set_threshold(*self._thresholds)
            self._thresholds = None
            gc.unfreeze()
        if self._timing:
            gc.callbacks.remove(self._timed)
            self._timing = False

    def _timed(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started_at = time.perf_counter()
        else:
            pause = time.perf_counter() - self._started_at
            self.pauses.labels(str(info["generation"])).observe(pause)
