"""Package data: the bundled trace samples and the embedded default configs.

The traces are excerpts of the Mooncake FAST'25 release (Apache-2.0); see
``kvcast/data/traces/NOTICE.md``.
"""

from __future__ import annotations

import atexit
from contextlib import ExitStack
from importlib.resources import as_file, files
from pathlib import Path

BUNDLED_TRACES: dict[str, str] = {
    "conversation": "conversation_sample.jsonl",
    "synthetic": "synthetic_sample.jsonl",
}

_EXTRACTED = ExitStack()
atexit.register(_EXTRACTED.close)


def bundled_trace_path(name: str = "conversation") -> Path:
    """The file path of a bundled trace sample (``conversation`` or ``synthetic``)."""
    if name not in BUNDLED_TRACES:
        valid = ", ".join(BUNDLED_TRACES)
        raise ValueError(f"unknown bundled trace {name!r}; valid names: {valid}")
    resource = files(__name__).joinpath("traces", BUNDLED_TRACES[name])
    if isinstance(resource, Path):
        return resource
    return Path(_EXTRACTED.enter_context(as_file(resource)))  # zipped install: a temp copy


def trace_file(spec: str | Path) -> tuple[Path, str | None]:
    """Where a trace named on a command line or in a notebook is: ``bundled:NAME`` is the
    bundled sample ``NAME`` (and that name), anything else a path (and no name)."""
    text = str(spec)
    if text.startswith("bundled:"):
        name = text.removeprefix("bundled:")
        return bundled_trace_path(name), name
    return Path(text), None
