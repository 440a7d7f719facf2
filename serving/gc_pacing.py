"""Python's cyclic garbage collector, paced for a process with a large, long-lived heap.

CPython collects its oldest generation once more than 10 young collections have run since
the last full one and the objects that survived into it since then reach a quarter of it. A
sidecar tracking 500,000 blocks holds a few hundred thousand such objects (the feature
state's runs, sessions and their dicts): each full collection scans all of them, 0.1-0.25 s
with every thread stopped (the GIL), the decision tick and ingestion with it, and the scan
finds nothing, since the state holds no reference cycles (its objects are freed by their
reference counts as the state drops them).

:class:`GcPacer` keeps the young generations automatic (a few milliseconds at most) and
takes the full collection off the automatic schedule: the process runs it itself (the
sidecar between two decision ticks, an agent from a task on its event loop) every
``full_every_s``, as ``gc.collect()`` then ``gc.freeze()``, so that the next one scans only
the objects made since (its pause is bounded by ``full_every_s`` of churn, not by the heap).
A frozen object is never collected, so a cycle that died after it was frozen (an abandoned
connection's objects, a replaced model's, say) is kept until the next *thaw*: every
``thaw_every``-th paced collection unfreezes first and scans the whole heap (the long pause
again, once per ``thaw_every x full_every_s``). Should the decision thread stall,
:meth:`watch` (called from another thread) hands full collections back to CPython until the
next paced one, so cyclic garbage never piles up without bound. Every collection is timed,
by generation and kind (``auto``: CPython's own; ``paced``; ``thaw``)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from pydantic import Field

from kvcast.config import FiniteConfig

NO_AUTOMATIC_FULL = 1 << 30  # young collections before an automatic full one: never
STALLED = 3.0  # full_every_s without a paced collection: CPython's schedule is back
PAUSE_BUCKETS = (1e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5)
KINDS = (("0", "auto"), ("1", "auto"), ("2", "auto"), ("2", "paced"), ("2", "thaw"))


class GcConfig(FiniteConfig):
    """The ``gc:`` section of the sidecar's and the agents' configs."""

    paced: bool = True  # full collections when the process picks, not when CPython does
    full_every_s: float = Field(10.0, gt=0)  # one paced full collection this often
    thaw_every: int = Field(360, ge=1)  # every N-th of them also scans the frozen objects


class GcPacer:
    """Owns the process's collector settings from :meth:`start` to :meth:`stop` (which puts
    back the thresholds it found and unfreezes); times collections meanwhile, paced or not, in
    ``registry`` (or in ``pauses``, for a registry made later) as
    ``{prefix}gc_pause_seconds{generation, kind}``. One per process. ``clock``: monotonic
    seconds."""

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
        self.pauses = pauses = Histogram(
            f"{prefix}gc_pause_seconds",
            "Python's cyclic GC: each collection's pause (every thread stopped), by generation "
            "(2: full) and kind (auto: CPython's schedule; paced: the process's own, the "
            "sidecar's between decision ticks; thaw: paced, scanning the frozen objects too)",
            ["generation", "kind"],
            registry=registry,
            buckets=PAUSE_BUCKETS,
        )
        # the series, made once: the callback must not take the family's lock (not
        # reentrant: a collection can start on a thread that holds it, in a scrape)
        self._series = {key: pauses.labels(*key) for key in KINDS}
        self.full_collections = 0  # paced full collections so far
        self._thresholds: tuple[int, int, int] | None = None  # found at start, if paced
        self._timing = False
        self._kind = "auto"  # of the collection under way
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
        self._paced_collection("paced", thaw=False)
        self._last_full = self.clock()  # before the thresholds: no paced one is due yet
        self._thresholds = gc.get_threshold()
        self._automatic(False)

    def maybe_collect(self) -> bool:
        """Run the paced full collection if it is due (the sidecar calls it between two ticks,
        on the decision thread); whether it ran."""
        if self._thresholds is None or self.clock() - self._last_full < self.full_every_s:
            return False
        self.full_collections += 1
        thaw = self.full_collections % self.thaw_every == 0
        self._paced_collection("thaw" if thaw else "paced", thaw)
        self._last_full = self.clock()
        self._automatic(False)  # (back off, if watch had handed them to CPython)
        return True

    def watch(self) -> bool:
        """From any thread but the decision one, now and then: if no paced collection ran for
        ``STALLED x full_every_s`` (the decision thread is stuck), full collections go back
        to CPython's schedule until the next paced one; whether they are there."""
        if self._thresholds is None:
            return False
        stalled = self.clock() - self._last_full > STALLED * self.full_every_s
        if stalled:
            self._automatic(True)
        return stalled

    def stop(self) -> None:
        if self._thresholds is not None:
            self._automatic(True)
            self._thresholds = None
            gc.unfreeze()
        if self._timing:
            gc.callbacks.remove(self._timed)
            self._timing = False

    def _automatic(self, on: bool) -> None:
        assert self._thresholds is not None
        t0, t1, t2 = self._thresholds
        gc.set_threshold(t0, t1, t2 if on else NO_AUTOMATIC_FULL)

    def _paced_collection(self, kind: str, thaw: bool) -> None:
        self._kind = kind
        try:
            if thaw:
                gc.unfreeze()  # this one scans everything: cycles frozen alive, now garbage, go
            gc.collect()
            gc.freeze()
        finally:
            self._kind = "auto"

    def _timed(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started_at = time.perf_counter()
            return
        gen = str(info["generation"])
        series = self._series.get((gen, self._kind if gen == "2" else "auto"))
        if series is not None:
            series.observe(time.perf_counter() - self._started_at)
