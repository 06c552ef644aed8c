"""A request's error response, as Kafka's ``AbstractRequest.getErrorResponse``: the response class at the
request's version, with the error in every error field and one entry per topic, partition, group or
resource the request named, so a client sees the error where it looks for its answer.

Built from the kio schemas, so an API added to the registry gets its error response without code here:
a response array whose entries carry an error code mirrors the request array naming the same things
(matched by identity fields: topic, partition, group, resource...); everything else takes the schema's
default, or Kafka's "unknown" value (-1) for offsets, epochs and ids, and records are empty, never null.
"""

from __future__ import annotations

import dataclasses
import datetime
import types
import typing
from functools import cache
from typing import TYPE_CHECKING, TypeVar

from epochkraft.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from kio.static.protocol import Entity, ResponsePayload

_Entry = TypeVar("_Entry", bound="Entity")  # a kio class: a response or one of its entries
_Response = TypeVar("_Response", bound="ResponsePayload")

UNKNOWN_SERVER_ERROR_MESSAGE = "The server experienced an unexpected error when processing the request."

# Field names that name the thing an entry answers for, by the concept they share across APIs.
_IDENTITY = {
    "topic": "topic",
    "name": "topic",
    "topic_name": "topic",
    "user": "topic",  # SCRAM results name the user their request entry named (a name, as a topic's)
    "topic_id": "topic_id",
    "partition": "partition",
    "partition_index": "partition",
    "partition_id": "partition",
    "index": "partition",
    "group_id": "group",
    "key": "key",
    "resource_type": "resource_type",
    "resource_name": "resource_name",
    "transactional_id": "transactional_id",
    "member_id": "member",
    "broker_id": "broker",
    "producer_id": "producer",  # WriteTxnMarkers' results answer their markers by producer
}
# Response entries that name nothing answer the request array of this name position by position.
_POSITIONAL = {
    "AclCreationResult": "creations",
    "DeleteAclsFilterResult": "filters",
    "EntryData": "entries",  # AlterClientQuotas: one answer per entry, naming its entity
}
# Response entry arrays copied from the request entry they answer, field by field by name: an
# AlterClientQuotas answer names the entity its entry named (AlterClientQuotasRequest.getErrorResponse).
_COPIED = {("EntryData", "entity")}
# Int fields answering "unknown" with -1, as Kafka's error constructors do (others take 0).
_UNKNOWN_INT_SUFFIXES = ("offset", "watermark", "timestamp", "epoch")
_UNKNOWN_INTS = {"leader_id", "node_id", "producer_id", "generation_id", "controller_id", "coordinator_id"}


@dataclasses.dataclass(frozen=True)
class _Field:
    name: str
    kafka_type: str | None  # None for an entity or an array of entities
    entity: type | None  # the nested kio class, for an entity or an array of entities
    is_array: bool
    nullable: bool
    default: object  # dataclasses.MISSING when the schema gives none


@cache
def _fields(cls: type) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        nullable = False
        origin = typing.get_origin(hint)
        if origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            nullable = len(args) < len(typing.get_args(hint))
            hint = args[0]
            origin = typing.get_origin(hint)
        is_array = origin is tuple
        inner = typing.get_args(hint)[0] if is_array else hint
        entity = inner if isinstance(inner, type) and dataclasses.is_dataclass(inner) else None
        default: object = f.default
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        out.append(_Field(f.name, f.metadata.get("kafka_type"), entity, is_array, nullable, default))
    return tuple(out)


@cache
def _carries_error(cls: type) -> bool:
    """Whether an entry of this class (or one nested in it) has an error code to carry the error."""
    return any(
        f.kafka_type == "error_code" or (f.entity is not None and f.is_array and _carries_error(f.entity))
        for f in _fields(cls)
    )


def _identities(cls: type) -> dict[str, _Field]:
    return {_IDENTITY[f.name]: f for f in _fields(cls) if f.name in _IDENTITY and not f.is_array}


def _request_source(
    request_item: object, target: _Field, used: set[str]
) -> tuple[str, tuple[object, ...] | None] | None:
    """The request array naming the same things as the response array ``target``: (field, value)."""
    assert target.entity is not None
    wanted = _identities(target.entity)
    best: tuple[int, str] | None = None
    item_class: type = type(request_item)
    for f in _fields(item_class):
        if not f.is_array or f.name in used:
            continue
        if f.entity is not None:
            score = 2 * len(wanted.keys() & _identities(f.entity).keys())
        else:  # a list of names or indexes: it fills the response entry's one identity of that type
            kind = "int" if f.kafka_type and f.kafka_type.startswith("int") else f.kafka_type
            score = int(any(_kind(w) == kind for w in wanted.values()))
        if score and (best is None or score > best[0] or (score == best[0] and f.name == target.name)):
            best = (score, f.name)
    positional = _POSITIONAL.get(target.entity.__name__)
    if best is None and positional is not None and hasattr(request_item, positional):
        return positional, getattr(request_item, positional)
    return None if best is None else (best[1], getattr(request_item, best[1]))


def _kind(f: _Field) -> str | None:
    return "int" if f.kafka_type and f.kafka_type.startswith("int") else f.kafka_type


def _default(f: _Field, error: ErrorCode, message: str | None) -> object:
    if f.kafka_type == "error_code":
        return error
    if f.name == "error_message" or f.name.endswith("_error_message"):
        return message if f.nullable else message or ""
    if f.is_array:
        return () if f.default is dataclasses.MISSING or f.default is None else f.default
    if f.kafka_type == "records":
        return b""  # never null: Kafka's error responses carry empty records
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.entity is not None:
        return None if f.nullable else _build(f.entity, None, error, message)
    kind = f.kafka_type or ""
    if kind.startswith(("int", "uint")):
        return -1 if f.name.endswith(_UNKNOWN_INT_SUFFIXES) or f.name in _UNKNOWN_INTS else 0
    if kind.startswith("timedelta"):
        return datetime.timedelta(0)
    if kind.startswith("datetime"):
        return None if f.nullable else datetime.datetime.fromtimestamp(0, datetime.UTC)
    if kind == "float64":
        return 0.0
    if kind == "bool":
        return False
    if kind == "string":
        return ""
    if kind == "bytes":
        return None if f.nullable else b""
    return None  # uuid: kio writes None as the zero uuid


def _build(
    cls: type[_Entry], source: object, error: ErrorCode, message: str | None, *, entry: bool = True
) -> _Entry:
    """An instance of ``cls`` answering for ``source`` (a request entry, a bare name or index, or None);
    ``entry`` is False for the response itself, which copies no identity from the request."""
    fields = _fields(cls)
    values: dict[str, object] = {}
    used: set[str] = set()
    if source is not None and not dataclasses.is_dataclass(source):  # a bare name or partition index
        kind = "int" if isinstance(source, int) else "string"
        target = next((f for f in _identities(cls).values() if _kind(f) == kind), None)
        if target is not None:
            values[target.name] = source
        source = None
    if source is not None and entry:
        mine = _identities(type(source))
        for concept, f in _identities(cls).items():
            if concept in mine and _kind(mine[concept]) == _kind(f):
                values[f.name] = getattr(source, mine[concept].name)
    for f in fields:
        if f.name in values:
            continue
        if source is not None and f.entity is not None and (cls.__name__, f.name) in _COPIED:
            values[f.name] = tuple(_copy(f.entity, item) for item in getattr(source, f.name, ()) or ())
            continue
        if source is not None and f.is_array and f.entity is not None and _carries_error(f.entity):
            found = _request_source(source, f, used)
            if found is not None:
                used.add(found[0])
                items = found[1] or ()
                values[f.name] = tuple(_build(f.entity, item, error, message) for item in items)
                continue
        values[f.name] = _default(f, error, message)
    return cls(**values)


def _copy(cls: type, item: object) -> object:
    return cls(**{f.name: getattr(item, f.name) for f in _fields(cls)})


PRODUCE_KEY = 0


def error_response(
    request: object, response_cls: type[_Response], error: ErrorCode = ErrorCode.unknown_server_error
) -> _Response | None:
    """``request``'s error response at ``response_cls`` (the response class of the request's version);
    None for a Produce with acks=0, which Kafka answers by closing the connection."""
    if getattr(request, "__api_key__", None) == PRODUCE_KEY and getattr(request, "acks", None) == 0:
        return None
    message = UNKNOWN_SERVER_ERROR_MESSAGE if error == ErrorCode.unknown_server_error else None
    return _build(response_cls, request, error, message, entry=False)


def error_answer(
    request: object, response_cls: type[_Response], error: ErrorCode = ErrorCode.unknown_server_error
) -> _Response:
    """``request``'s error response, for a request every error of which is answered (any but a Produce with
    acks=0: a forwarded request, a Raft RPC)."""
    response = error_response(request, response_cls, error)
    if response is None:
        raise ValueError("a Produce with acks=0 has no error response")
    return response
