"""Rate limit for handler-failure log lines: the first failure of a kind is logged with its traceback;
identical ones (same API, version, exception type and raising line) within the interval are counted and
reported with the next line logged for that kind, so a client retrying a failing request cannot flood
the log. Sans-IO: the caller passes the time."""

from __future__ import annotations

import traceback
from collections import OrderedDict

FailureKey = tuple[str, int, str, str]  # API name, version, exception type, where it was raised


def failure_key(api_name: str, api_version: int, exc: BaseException) -> FailureKey:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    return api_name, api_version, type(exc).__name__, where


class FailureLog:
    def __init__(self, interval_s: float = 60.0, max_kinds: int = 256) -> None:
        self.interval_s = interval_s
        self.max_kinds = max_kinds
        self._kinds: OrderedDict[FailureKey, tuple[float, int]] = OrderedDict()  # last logged, suppressed

    def admit(self, key: FailureKey, now: float) -> int | None:
        """None to suppress this failure; else log it, noting the returned number suppressed since the
        last line of its kind."""
        entry = self._kinds.get(key)
        if entry is not None and now - entry[0] < self.interval_s:
            self._kinds[key] = (entry[0], entry[1] + 1)
            return None
        self._kinds[key] = (now, 0)
        self._kinds.move_to_end(key)
        while len(self._kinds) > self.max_kinds:  # bounded whatever a client sends
            self._kinds.popitem(last=False)
        return 0 if entry is None else entry[1]
