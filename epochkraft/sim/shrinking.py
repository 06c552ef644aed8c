"""Shrinking a failing fault schedule, shared by the cluster and the Raft quorum simulations."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar


class FailingRun(Protocol):
    @property
    def schedule(self) -> Sequence[object]: ...

    @property
    def violation(self) -> str | None: ...


Run = TypeVar("Run", bound=FailingRun)


def shrink_schedule(result: Run, rerun: Callable[[list], Run]) -> Run:
    """Drops faults one at a time while the run (same seed) still violates an invariant; returns the
    smallest failing run found, from which no single fault can be dropped."""
    best = result
    changed = True
    while changed:
        changed = False
        for index in range(len(best.schedule)):
            candidate = [*best.schedule[:index], *best.schedule[index + 1 :]]
            attempt = rerun(candidate)
            if attempt.violation is not None:
                best = attempt
                changed = True
                break
    return best
