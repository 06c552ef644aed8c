"""Small helpers shared by handler modules (not a handler itself: no leading 'k')."""

from __future__ import annotations

import datetime

from kio.static.primitive import i32Timedelta

NO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def ms(value: datetime.timedelta | int) -> int:
    """kio carries some durations as timedelta; logic works in milliseconds."""
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return int(value)


def build(cls: type, **fields: object) -> object:
    """Builds kio class ``cls`` from the given fields it has, ignoring those its version lacks."""
    names = cls.__dataclass_fields__  # type: ignore[attr-defined]
    return cls(**{name: value for name, value in fields.items() if name in names})
