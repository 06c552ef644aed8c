"""Waiting, in a test, for a cluster of real processes to get somewhere."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 30.0, what: str = "condition") -> T:
    """``predicate()`` every 0.2 s until it returns something true, which it returns."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"{what} not met in {timeout} s")
