"""Frozen, validated configuration loaded from YAML.

Every config object derives from :class:`FrozenConfig`: immutable, unknown keys rejected, types
checked by pydantic. :func:`load_config` turns any validation problem into one
:class:`ConfigError` line that names the file, the dotted key and what was expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError


class ConfigError(ValueError):
    """A configuration file or value is invalid; the message names file, key and reason."""


class FrozenConfig(BaseModel):
    """Base class for every config object: frozen, strict about unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)


C = TypeVar("C", bound=FrozenConfig)


def _format_errors(source: str, err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "<root>"
        got = e.get("input")
        if e["type"] == "extra_forbidden":
            lines.append(f"{source}: key '{key}': unknown key")
        else:
            lines.append(f"{source}: key '{key}': {e['msg']} (got {got!r})")
    return "; ".join(lines)


def parse_config(cls: type[C], data: dict[str, Any] | None, source: str = "<config>") -> C:
    """Validate a mapping into ``cls``; raise :class:`ConfigError` naming ``source``."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: expected a mapping at the top level, got {type(data).__name__}"
        )
    try:
        return cls.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_format_errors(source, err)) from None


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; a missing file or a syntax error raises :class:`ConfigError`."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no such config file")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ConfigError(f"{p}: not UTF-8 text (byte {err.start})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark is not None else str(p)
        raise ConfigError(f"{where}: invalid YAML: {getattr(err, 'problem', err)}") from None
    return data if data is not None else {}


def load_config(cls: type[C], path: str | Path) -> C:
    """Load and validate a YAML file into the frozen config class ``cls``."""
    return parse_config(cls, read_yaml(path), source=str(path))


def with_overrides(cfg: C, **overrides: Any) -> C:
    """Return a validated copy of ``cfg`` with top-level ``overrides`` applied (None ignored)."""
    data = cfg.model_dump()
    for key, value in overrides.items():
        if value is not None:
            data[key] = value
    return parse_config(type(cfg), data, source="<overrides>")
