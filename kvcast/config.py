"""Frozen, validated configuration loaded from YAML.

Every config object derives from :class:`FrozenConfig`: immutable, unknown keys rejected, types
checked by pydantic. :func:`load_config` turns any validation problem into one
:class:`ConfigError` line that names the file, the dotted key and what was expected.

A mapping from a file or the command line (:func:`parse_config`) is validated strictly, as
JSON: a value of the wrong type is refused, not converted (``nodes: true`` is not 1 node,
``nodes: "8"`` is not 8, ``use_session: "yes"`` is not true); an integer stands for a float,
and a list for a tuple. YAML numbers in exponent form (``1e9``, ``1.0e9``: strings to
PyYAML's YAML 1.1) are read as floats. Any key may be left out, at any depth: a section given
in part keeps the rest of that section's defaults. Code that builds a config object directly
keeps pydantic's usual conversions.
"""

from __future__ import annotations

import json
import re
import types
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError


class _Loader(yaml.SafeLoader):
    """YAML as a config author expects it, YAML 1.2's core schema for booleans and numbers
    rather than the YAML 1.1 of PyYAML (a date is still read as one, and refused as no config
    value): ``true`` / ``false`` are the only booleans (``off``, ``no``, ``on``,
    ``yes`` are strings: ``arrival_spread: off`` means "off"), integers are decimal (``010`` is
    10, not 8; ``0x`` / ``0o`` prefixes as written; ``_`` between digits allowed), ``2:00`` is
    a string (not 120), and any number in exponent form is a float (``1e9``). A mapping that
    names a key twice is refused (YAML 1.1 silently kept the last one), naming where each is."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:  # its own keys (a merged mapping's may be overridden)
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                mark = first.setdefault(key, key_node.start_mark)
            except TypeError:  # an unhashable key: the base class says so
                break
            if mark is not key_node.start_mark:  # (two keys on one line too: {a: 1, a: 2})
                where = f"line {mark.line + 1}, column {mark.column + 1}"
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first on {where})", key_node.start_mark
                )
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = str(self.construct_scalar(node)).replace("_", "")
        sign, digits = (-1, text[1:]) if text[:1] == "-" else (1, text.lstrip("+"))
        base = {"0x": 16, "0o": 8}.get(digits[:2].lower(), 10)
        try:
            return sign * int(digits[2:] if base != 10 else digits, base)
        except ValueError:  # an explicit !!int of another form (0b..., 1:30)
            # (never the value: it may be a token)
            raise yaml.constructor.ConstructorError(
                None, None, "not an integer (decimal, 0x or 0o)", node.start_mark
            ) from None


_BOOL, _INT, _FLOAT = (f"tag:yaml.org,2002:{t}" for t in ("bool", "int", "float"))
_Loader.yaml_implicit_resolvers = {  # YAML 1.1's bool, int and float rules dropped ...
    first: [(tag, rx) for tag, rx in rules if tag not in (_BOOL, _INT, _FLOAT)]
    for first, rules in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _tag, _rule, _firsts in (  # ... for YAML 1.2 core's (plus _ between digits)
    (_BOOL, r"true|True|TRUE|false|False|FALSE", "tTfF"),
    (_INT, r"[-+]?[0-9](?:_?[0-9])*|0x[0-9a-fA-F]+|0o[0-7]+", "-+0123456789"),
    (
        _FLOAT,
        r"[-+]?(?:[0-9](?:_?[0-9])*\.[0-9_]*|\.[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)?",
        "-+0123456789.",
    ),
    (_FLOAT, r"[-+]?[0-9](?:_?[0-9])*[eE][-+]?[0-9]+", "-+0123456789"),
    (_FLOAT, r"[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)", "-+."),
):
    _Loader.add_implicit_resolver(_tag, re.compile(f"^(?:{_rule})$"), list(_firsts))
_Loader.add_constructor(_INT, _Loader.construct_yaml_int)


class ConfigError(ValueError):
    """A configuration file or value is invalid; the message names file, key and reason."""


class FrozenConfig(BaseModel):
    """Base class for every config object: frozen, strict about unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)


class FiniteConfig(FrozenConfig):
    """A frozen config whose numbers are all finite (``.inf`` is refused): for long-running
    services, where an infinite period, timeout or grace means a thread that waits for ever
    (or overflows the wait)."""

    model_config = ConfigDict(allow_inf_nan=False)


C = TypeVar("C", bound=FrozenConfig)


def _alternatives(model: Any, name: str) -> dict[str, type[BaseModel]]:
    """The members of ``model``'s field ``name`` when it is a union told apart by a
    discriminator (``kind: lgbm``), by their tag; else empty."""
    field = getattr(model, "model_fields", {}).get(name)
    if field is None or not isinstance(field.discriminator, str):
        return {}
    out = {}
    for member in typing.get_args(field.annotation):
        tag = getattr(member, "model_fields", {}).get(field.discriminator)
        if tag is not None and isinstance(tag.default, str):
            out[tag.default] = member
    return out


def _walk(cls: type[BaseModel], loc: tuple[Any, ...]) -> tuple[str, Any]:
    """An error location as the file spells it, and the model class it ends in (None past a
    plain value): pydantic puts the tag of a discriminated union in the path
    (``model.lgbm.num_leaves``), the file does not."""
    parts: list[str] = []
    model: Any = cls
    i = 0
    while i < len(loc):
        part = loc[i]
        parts.append(str(part))
        alternatives = _alternatives(model, part) if isinstance(part, str) else {}
        if i + 1 < len(loc) and loc[i + 1] in alternatives:
            model, i = alternatives[loc[i + 1]], i + 2
            continue
        field = getattr(model, "model_fields", {}).get(part) if isinstance(part, str) else None
        ann = field.annotation if field is not None else None
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        i += 2 if _is_union(ann) and i + 1 < len(loc) else 1  # (the member tried: ``.float``)
    return ".".join(parts), model


def _is_union(annotation: Any) -> bool:
    """Whether pydantic tries ``annotation``'s members in turn, naming in an error's location
    the one tried (``arrival_spread.float``); ``X | None`` is not such a union."""
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return False
    return sum(a is not type(None) for a in typing.get_args(annotation)) > 1


def _missing_item(e: Any) -> bool:
    """A pydantic error for an item missing from a fixed-length list (a tuple given short)."""
    return bool(e["type"] == "missing" and e["loc"] and isinstance(e["loc"][-1], int))


# config keys whose value is never shown in an error: those that hold a secret, and
# token_env, which names the variable holding one (a secret pasted in its place is refused)
SECRET_KEYS = frozenset({"token", "ingest_token", "token_env"})


def _secret(loc: tuple[Any, ...]) -> bool:
    """Whether a key at ``loc`` holds a secret, or may (:data:`SECRET_KEYS`; ``tenant_tokens``
    or one of its entries, which hold mappings): its value is never shown."""
    if any(part in SECRET_KEYS for part in loc):
        return True
    if "tenant_tokens" in loc:  # the section, or an entry, given as a plain value: the token
        rest = loc[loc.index("tenant_tokens") + 1 :]  # itself may be pasted there
        return all(isinstance(part, int) for part in rest)
    return False


def _format_errors(source: str, err: ValidationError, cls: type[BaseModel]) -> str:
    lines = []
    # a fixed-length list given too short: its missing items' indices (the last + 1 is the
    # length it needs), told in one line at the first of them
    short: dict[tuple[Any, ...], list[int]] = {}
    for e in err.errors():
        if _missing_item(e):
            short.setdefault(tuple(e["loc"][:-1]), []).append(e["loc"][-1])
    for e in err.errors():
        key, _ = _walk(cls, e["loc"])
        got = e.get("input")
        msg = e["msg"]
        if e["type"] == "value_error":  # our own validators' messages name what they refuse
            msg = msg.removeprefix("Value error, ")
        elif e["type"] == "union_tag_not_found":  # a section of alternatives without its tag
            disc = str(e.get("ctx", {}).get("discriminator", "")).strip("'")
            _, parent = _walk(cls, e["loc"][:-1])
            tags = ", ".join(_alternatives(parent, e["loc"][-1]) if e["loc"] else ())
            msg = f"'{disc}' is required" + (f" (one of {tags})" if tags else "")
        if e["type"] == "extra_forbidden":
            lines.append(f"{source}: key '{key}': unknown key")
        elif _missing_item(e):  # pydantic: "<key>.<i>: Field required" per missing item
            idx = short[tuple(e["loc"][:-1])]
            if e["loc"][-1] == min(idx):
                whole, _ = _walk(cls, e["loc"][:-1])
                lines.append(f"{source}: key '{whole}': too few values: {min(idx)} given, "
                             f"{max(idx) + 1} needed")  # fmt: skip
        elif not key:  # a rule across keys (a model validator): its message says it all
            lines.append(f"{source}: {msg}")
        elif isinstance(got, dict | list) or _secret(e["loc"]):  # a whole section (it may
            lines.append(f"{source}: key '{key}': {msg}")  # hold a secret), or a secret
        elif e["type"] == "value_error" and repr(got) in msg:  # it names the value already
            lines.append(f"{source}: key '{key}': {msg}")
        else:
            head, tail = f"{source}: key '{key}': ", f" (got {got!r})"
            last = lines[-1] if lines else ""
            if last.startswith(head) and last.endswith(tail):  # a union's members, one by one
                lines[-1] = (
                    f"{last.removesuffix(tail)}, or {msg.removeprefix('Input should be ')}{tail}"
                )
            else:
                lines.append(f"{head}{msg}{tail}")
    prefix = f"{source}: "  # named once when every problem is of the same source
    if len(lines) > 1 and all(line.startswith(prefix) for line in lines):
        return prefix + "; ".join(line.removeprefix(prefix) for line in lines)
    return "; ".join(lines)


def _completed(
    cls: type[BaseModel], given: dict[str, Any], default: BaseModel | None = None
) -> dict[str, Any]:
    """``given`` (a mapping for ``cls``, whose default is ``default`` when it is a section)
    with every key it leaves out that the class would fill in otherwise than ``default`` does
    (or not at all) taken from ``default``, section by section: a section given in part keeps
    the rest of its own defaults (``node: {nvme: {capacity_gib: 512}}`` keeps the NVMe tier's
    5 GB/s, not the 25 GB/s of a tier's class; ``network: {rack: {latency_us: 2}}`` keeps the
    rack's bandwidth)."""
    out = dict(given)
    for name, field in cls.model_fields.items():
        section = getattr(default, name) if default is not None else field.default
        # a section, not one of a union of alternatives (whose keys are another class's)
        is_section = isinstance(section, BaseModel) and type(section) is field.annotation
        if name in given:
            if is_section and isinstance(given[name], dict):
                out[name] = _completed(type(section), given[name], section)
        elif default is not None and (
            field.is_required() or field.get_default(call_default_factory=True) != section
        ):
            out[name] = default.model_dump(mode="json", include={name})[name]
    return out


def parse_config(cls: type[C], data: dict[str, Any] | None, source: str = "<config>") -> C:
    """Validate a mapping into ``cls``; raise :class:`ConfigError` naming ``source``."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: expected a mapping at the top level, got {type(data).__name__}"
        )
    try:
        text = json.dumps(_completed(cls, data), default=_plain, allow_nan=True)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{source}: {err}") from None
    try:
        return cls.model_validate_json(text, strict=True)
    except ValidationError as err:
        raise ConfigError(_format_errors(source, err, cls)) from None


def _plain(value: Any) -> Any:
    """What ``json.dumps`` makes of a non-JSON value in a config mapping (a TypeError if none:
    a YAML date, a set...)."""
    if isinstance(value, BaseModel):  # a config object passed as an override
        return value.model_dump(mode="json")
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, set | frozenset):
        return sorted(value)
    raise TypeError(  # (never the value itself: it may be a token YAML read as a date)
        f"a {type(value).__name__} is not a config value: use a number, a string (quote a "
        "date or binary value), true/false, a list or a mapping"
    )


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; a missing file or a syntax error raises :class:`ConfigError`."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{p}: a directory, not a config file")
    if not p.is_file():
        raise ConfigError(f"{p}: no such config file")
    try:
        data = yaml.load(p.read_text(encoding="utf-8"), Loader=_Loader)  # a SafeLoader
    except UnicodeDecodeError as err:
        raise ConfigError(f"{p}: not UTF-8 text (byte {err.start})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark is not None else str(p)
        raise ConfigError(f"{where}: invalid YAML: {_yaml_problem(err)}") from None
    except (ValueError, KeyError, AttributeError, TypeError):  # a tagged value (!!float x...)
        raise ConfigError(f"{p}: invalid YAML: a tagged value (!!...) it cannot read; quote "
                          "the value") from None  # fmt: skip
    return data if data is not None else {}


def _yaml_problem(err: yaml.YAMLError) -> str:
    """What is wrong, never the text of an unknown tag or alias: an unquoted secret that
    starts with ``!`` or ``*`` is read as one."""
    problem = str(getattr(err, "problem", err))
    if isinstance(err, yaml.composer.ComposerError) and "alias" in problem:
        return "an undefined alias (a value starting with *); quote the value"
    if isinstance(err, yaml.constructor.ConstructorError) and "for the tag" in problem:
        return "a tag it does not know (a value starting with !); quote the value"
    return problem


def load_config(cls: type[C], path: str | Path) -> C:
    """Load and validate a YAML file into the frozen config class ``cls``."""
    return parse_config(cls, read_yaml(path), source=str(path))


def with_overrides(cfg: C, **overrides: Any) -> C:
    """Return a validated copy of ``cfg`` with top-level ``overrides`` applied (None ignored)."""
    return _overridden(cfg, overrides, lambda keys: f"<overrides of {', '.join(keys)}>")


def with_options(cfg: C, **options: Any) -> C:
    """:func:`with_overrides` for command-line options named as their keys (:func:`option`),
    which an error names: ``command line (--nodes): key 'nodes': ...``."""
    return _overridden(cfg, options, lambda keys: command_line(map(option, keys)))


def option(key: str) -> str:
    """The command-line option that sets config key ``key`` (``duration_s``: ``--duration-s``)."""
    return "--" + key.replace("_", "-")


def command_line(options: Iterable[str]) -> str:
    """How an error names settings given as ``options``: ``command line (--nodes, --seed)``."""
    return f"command line ({', '.join(options)})"


def _overridden(cfg: C, overrides: dict[str, Any], source: Callable[[list[str]], str]) -> C:
    given = {key: value for key, value in overrides.items() if value is not None}
    if not given:
        return cfg
    data = cfg.model_dump(mode="json") | given
    return parse_config(type(cfg), data, source=source(list(given)))
