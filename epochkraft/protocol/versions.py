"""Converts a kio message between versions of the same API, field by field, by name.

Handlers work on one version of a message (usually the newest) and convert at the edge: a request
is upgraded on the way in and the response downgraded to the version the peer asked for. Fields the
target version lacks are dropped; fields the source lacks take the target's schema default.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import cache
from typing import TYPE_CHECKING, TypeVar

from kio.static.protocol import RequestPayload, ResponsePayload

from epochkraft.protocol.framing import request_class, response_class

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


@cache
def _field_plan(cls: type) -> tuple[tuple[str, type[DataclassInstance] | None, bool], ...]:
    """(name, nested entity class or None, is_tuple) for each field of a kio class."""
    hints = typing.get_type_hints(cls)
    plan = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        nested: type[DataclassInstance] | None = None
        is_tuple = False
        origin = typing.get_origin(hint)
        if origin is tuple:
            is_tuple = True
            inner = typing.get_args(hint)[0]
            if isinstance(inner, type) and dataclasses.is_dataclass(inner):
                nested = inner
        elif origin in (typing.Union, types.UnionType):
            for arg in typing.get_args(hint):
                if isinstance(arg, type) and dataclasses.is_dataclass(arg):
                    nested = arg
        elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
            nested = hint
        plan.append((f.name, nested, is_tuple))
    return tuple(plan)


T = TypeVar("T", bound="DataclassInstance")  # a kio class: a message, or an entity nested in one


def convert(obj: DataclassInstance, target: type[T]) -> T:
    """Copies ``obj`` into kio class ``target`` (another version of the same message)."""
    if type(obj) is target and isinstance(obj, target):  # isinstance: for the type checker
        return obj
    kwargs: dict[str, object] = {}
    for name, nested, is_tuple in _field_plan(target):
        if not hasattr(obj, name):
            continue
        value = getattr(obj, name)
        if nested is not None and value is not None:
            value = tuple(convert(v, nested) for v in value) if is_tuple else convert(value, nested)
        kwargs[name] = value
    try:
        return target(**kwargs)
    except TypeError:
        # A required field the source lacks: fill it with a zero value of the right shape.
        for f in dataclasses.fields(target):
            if (
                f.name not in kwargs
                and f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING
            ):
                kwargs[f.name] = _zero(target, f.name)
        return target(**kwargs)


def _zero(cls: type, name: str) -> object:
    hint = typing.get_type_hints(cls)[name]
    origin = typing.get_origin(hint)
    if origin is tuple:
        return ()
    if origin in (typing.Union, types.UnionType):
        return None
    if hint is str:
        return ""
    if hint is bool:
        return False
    if hint is bytes:
        return b""
    try:
        return hint(0)
    except Exception:
        return None


def upgrade_request(request: RequestPayload, version: int) -> RequestPayload:
    """``request`` at another version of its API (the class ``request_class`` names, of the same kind)."""
    target: type[RequestPayload] = request_class(request.__api_key__, version)
    return convert(request, target)


def response_for(api_key: int, version: int) -> type[ResponsePayload]:
    """The response class of an API's version, for a caller that names it (a request forwarded at the
    client's version)."""
    return response_class(api_key, version)


def downgrade_response(response: ResponsePayload, version: int) -> ResponsePayload:
    target: type[ResponsePayload] = response_class(response.__api_key__, version)
    return convert(response, target)
