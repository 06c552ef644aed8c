"""Typed daemon settings loaded from a Kafka-style .properties file and command-line flags.

Each daemon declares a frozen dataclass whose fields carry Kafka's property name in their metadata
(``prop("replica.lag.time.max.ms")``). Unknown properties and unparsable values are a ConfigError
with the file, line and property named, never a traceback.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")
V = TypeVar("V")  # a settings field's type
PropertyValue: TypeAlias = bool | int | float | str | None  # a property's value parsed for its field


class ConfigError(ValueError):
    """Bad configuration: unknown property, unparsable value, or value out of range."""


def prop(name: str, default: V, doc: str = "", *, minimum: float | None = None) -> V:
    """A settings field bound to a Kafka property name."""
    return dataclasses.field(default=default, metadata={"property": name, "doc": doc, "minimum": minimum})


def read_properties(path: str | Path) -> dict[str, tuple[str, int]]:
    """Parses ``key=value`` lines (``#``/``!`` comments); returns {key: (value, line number)}."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
    result: dict[str, tuple[str, int]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep <= 0:
            raise ConfigError(f"{path}:{number}: expected 'key=value', got {raw!r}")
        result[line[:sep].strip()] = (line[sep + 1 :].strip(), number)
    return result


def _parse(value: str, kind: object, where: str) -> PropertyValue:
    try:
        if kind is bool:
            lowered = value.lower()
            if lowered not in ("true", "false"):
                raise ValueError("expected true or false")
            return lowered == "true"
        if kind is int:
            return int(value)
        if kind is float:
            return float(value)
        if typing.get_origin(kind) in (typing.Union, type(int | None)) and type(None) in typing.get_args(
            kind
        ):
            inner = next(a for a in typing.get_args(kind) if a is not type(None))
            return None if value in ("", "null", "none") else _parse(value, inner, where)
        return value
    except ValueError as exc:
        raise ConfigError(f"{where}: bad value {value!r}: {exc}") from exc


def property_fields(cls: type) -> dict[str, dataclasses.Field[object]]:
    return {f.metadata["property"]: f for f in dataclasses.fields(cls) if "property" in f.metadata}


LISTENER_PREFIX = "listener.name."


def listener_property(key: str, per_listener: frozenset[str]) -> tuple[str, str] | None:
    """Kafka's per-listener form ``listener.name.<listener>.<property>`` -> (LISTENER, property), for the
    properties a daemon takes per listener (None: not that form)."""
    if not key.startswith(LISTENER_PREFIX):
        return None
    listener, sep, name = key.removeprefix(LISTENER_PREFIX).partition(".")
    if not sep or not listener or name not in per_listener:
        return None
    return listener.upper(), name


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    """``--override KEY=VALUE`` flags (as Kafka's start script takes) -> {property: raw value}."""
    result: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override: expected KEY=VALUE, got {item!r}")
        result[key.strip()] = value.strip()
    return result


def load_settings(
    cls: type[T],
    config_file: str | Path | None = None,
    overrides: Mapping[str, object] | None = None,
    properties: dict[str, str] | None = None,
) -> T:
    """Builds ``cls`` from defaults, then the config file, then ``properties`` (Kafka property -> raw
    value, from --override), then ``overrides`` (field name -> value)."""
    hints = typing.get_type_hints(cls)
    by_property = property_fields(cls)
    values: dict[str, object] = {}
    sources: list[tuple[str, str, str]] = []  # (property, raw value, where)
    if config_file is not None:
        sources += [
            (k, raw, f"{config_file}:{line}") for k, (raw, line) in read_properties(config_file).items()
        ]
    sources += [(k, raw, "--override") for k, raw in (properties or {}).items()]
    per_listener: frozenset[str] = getattr(cls, "PER_LISTENER_PROPERTIES", frozenset())
    by_listener: dict[tuple[str, str], str] = {}
    for key, raw, where in sources:
        if (named := listener_property(key, per_listener)) is not None:
            by_listener[named] = raw  # checked where it is used, as its broker-wide form
            continue
        if key not in by_property:
            known = ", ".join(sorted(by_property))
            raise ConfigError(f"{where}: unknown property {key!r} (known: {known})")
        field = by_property[key]
        values[field.name] = _parse(raw, hints[field.name], f"{where}: {key}")
    if by_listener:
        values["listener_properties"] = tuple(sorted((*named, raw) for named, raw in by_listener.items()))
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = value
    settings = cls(**values)
    for f in dataclasses.fields(settings):
        minimum = f.metadata.get("minimum")
        value = getattr(settings, f.name)
        if minimum is not None and isinstance(value, int | float) and value < minimum:
            name = f.metadata.get("property", f.name)
            raise ConfigError(f"{name} must be >= {minimum}, got {value}")
    return settings


def parse_host_port(value: str) -> tuple[str, int]:
    """'HOST:PORT' -> (host, port); ConfigError when malformed."""
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"expected HOST:PORT, got {value!r}")
    try:
        number = int(port)
    except ValueError as exc:
        raise ConfigError(f"bad port in {value!r}") from exc
    if not 0 <= number <= 65535:
        raise ConfigError(f"port out of range in {value!r}")
    return host, number
