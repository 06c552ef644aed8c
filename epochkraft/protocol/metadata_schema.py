"""Kafka's KRaft metadata record schemas (JSON, Apache-2.0, shipped in ``schemas/metadata``), parsed.

Both the generated dataclasses (``metadata_records.py``) and the codec (``metadata_codec.py``) are driven by
these schemas, so the bytes follow Kafka's definitions rather than hand-written layouts.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources


@dataclass(frozen=True, slots=True)
class Versions:
    low: int
    high: int | None  # None = open-ended ("3+")

    @classmethod
    def parse(cls, text: str | None) -> Versions:
        if not text or text == "none":
            return cls(1, 0)  # empty range
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        low, _, high = text.partition("-")
        return cls(int(low), int(high or low))

    def __contains__(self, version: int) -> bool:
        return self.low <= version and (self.high is None or version <= self.high)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str  # snake_case attribute name
    kafka_name: str
    type: str  # "int32", "[]int32", "[]BrokerEndpoint", "uuid", ...
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: str | None
    struct: StructSpec | None  # for arrays of structs / nested structs

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type


@dataclass(frozen=True, slots=True)
class StructSpec:
    name: str
    fields: tuple[FieldSpec, ...]


@dataclass(frozen=True, slots=True)
class RecordSchema:
    name: str
    api_key: int
    valid: Versions
    struct: StructSpec


def snake_case(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _field(raw: dict) -> FieldSpec:
    struct = None
    if "fields" in raw:
        struct = StructSpec(raw["type"].removeprefix("[]"), tuple(_field(f) for f in raw["fields"]))
    tag = raw.get("tag")
    return FieldSpec(
        name=snake_case(raw["name"]),
        kafka_name=raw["name"],
        type=raw["type"],
        versions=Versions.parse(raw.get("versions")),
        nullable=Versions.parse(raw.get("nullableVersions")),
        tagged=Versions.parse(raw.get("taggedVersions")),
        tag=None if tag is None else int(tag),
        default=None if raw.get("default") is None else str(raw["default"]),
        struct=struct,
    )


def _load(text: str) -> RecordSchema:
    data = json.loads("\n".join(line for line in text.splitlines() if not line.strip().startswith("//")))
    return RecordSchema(
        name=data["name"],
        api_key=int(data["apiKey"]),
        valid=Versions.parse(data["validVersions"]),
        struct=StructSpec(data["name"], tuple(_field(f) for f in data["fields"])),
    )


@cache
def all_schemas() -> dict[str, RecordSchema]:
    """Every metadata record schema, by record name."""
    folder = resources.files("epochkraft.protocol").joinpath("schemas/metadata")
    schemas = [_load(entry.read_text()) for entry in folder.iterdir() if entry.name.endswith(".json")]
    return {s.name: s for s in sorted(schemas, key=lambda s: s.api_key)}
