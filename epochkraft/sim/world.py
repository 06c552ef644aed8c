"""The simulated world: a virtual clock, a seeded event queue and a lossy network between named nodes.

Nothing here reads the real clock or touches a socket. Every random choice comes from one
``random.Random(seed)``, and events at the same virtual time run in insertion order, so a seed always
replays the same schedule.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LinkPolicy:
    """How one direction of a link treats messages."""

    min_delay_ms: int = 1
    max_delay_ms: int = 5
    drop: float = 0.0
    duplicate: float = 0.0


class Violation(Exception):
    """An invariant broken (safety, or liveness once the faults healed): the run stops and reports it."""


# (at_ms, insertion sequence, action, label): plain tuples so the heap compares in C; the sequence is
# unique, so actions are never compared.
_Event = tuple[int, int, Callable[[], object], str]


class World:
    """Virtual time plus the network. ``run_until`` executes events in (time, insertion) order."""

    def __init__(self, seed: int, default_link: LinkPolicy | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now_ms = 0
        self.default_link = default_link or LinkPolicy()
        self.links: dict[tuple[str, str], LinkPolicy] = {}
        self.cut: set[frozenset[str]] = set()
        self.cut_one_way: set[tuple[str, str]] = set()  # (src, dst): src's messages to dst are lost
        self.label_delays: dict[tuple[str, str, str], int] = {}  # (src, dst, message label) -> extra delay
        self.trace: list[str] = []
        self._queue: list[_Event] = []
        self._seq = itertools.count()
        self.delivered = 0
        self.dropped = 0
        self._timers: dict[str, tuple[int, int]] = {}  # owner -> (token, when) of its armed timer
        self._tokens = itertools.count()

    # ---- time ---------------------------------------------------------------------------------------
    def at(self, at_ms: int, action: Callable[[], object], label: str = "") -> None:
        """Runs ``action`` at ``at_ms`` (what it returns is dropped)."""
        heapq.heappush(self._queue, (max(at_ms, self.now_ms), next(self._seq), action, label))

    def after(self, delay_ms: int, action: Callable[[], object], label: str = "") -> None:
        self.at(self.now_ms + delay_ms, action, label)

    def run_until(self, end_ms: int, stop: Callable[[], bool] | None = None) -> None:
        while self._queue and self._queue[0][0] <= end_ms:
            at_ms, _seq, action, _label = heapq.heappop(self._queue)
            self.now_ms = at_ms
            action()
            if stop is not None and stop():
                return
        self.now_ms = max(self.now_ms, end_ms)

    def wake(self, owner: str, at_ms: int, action: Callable[[], object]) -> None:
        """A node's one timer (its core's next deadline): armed again only for an earlier deadline, or
        once the armed one has passed; ``action`` runs only while it is still ``owner``'s timer."""
        armed = self._timers.get(owner)
        if armed is not None and armed[1] <= at_ms and armed[1] >= self.now_ms:
            return
        token = next(self._tokens)
        self._timers[owner] = (token, at_ms)

        def fire() -> None:
            if self._timers.get(owner, (None,))[0] == token:
                del self._timers[owner]
                action()

        self.at(at_ms, fire, "timer")

    def cancel_wake(self, owner: str) -> None:
        """The node stopped: its armed timer does nothing."""
        self._timers.pop(owner, None)

    def next_event_ms(self) -> int | None:
        return self._queue[0][0] if self._queue else None

    def log(self, message: str) -> None:
        self.trace.append(f"{self.now_ms:>7} ms  {message}")

    # ---- network ------------------------------------------------------------------------------------
    def link(self, src: str, dst: str) -> LinkPolicy:
        return self.links.get((src, dst), self.default_link)

    def set_link(self, src: str, dst: str, policy: LinkPolicy) -> None:
        self.links[(src, dst)] = policy

    def partition(self, a: str, b: str) -> None:
        self.cut.add(frozenset((a, b)))

    def partition_one_way(self, src: str, dst: str) -> None:
        """An asymmetric partition: what ``src`` sends ``dst`` is lost, the other way still arrives."""
        self.cut_one_way.add((src, dst))

    def cut_for(self, a: str, b: str, length_ms: int, *, one_way: bool = False) -> None:
        """Cuts the link between ``a`` and ``b`` (only what ``a`` sends ``b``, ``one_way``) and heals it
        ``length_ms`` later."""
        if one_way:
            self.partition_one_way(a, b)
            self.after(length_ms, lambda: self.heal_one_way(a, b), "heal")
        else:
            self.partition(a, b)
            self.after(length_ms, lambda: self.heal(a, b), "heal")

    def heal_one_way(self, src: str, dst: str) -> None:
        self.cut_one_way.discard((src, dst))

    def heal(self, a: str | None = None, b: str | None = None) -> None:
        if a is None:
            self.cut.clear()
            self.cut_one_way.clear()
        else:
            self.cut.discard(frozenset((a, b)))

    def isolated(self, a: str, b: str) -> bool:
        return frozenset((a, b)) in self.cut or (a, b) in self.cut_one_way

    def send(self, src: str, dst: str, deliver: Callable[[], None], label: str = "") -> None:
        """Schedules ``deliver`` at the destination, subject to the link's delay, loss and duplication.

        A message crossing a cut link is lost; so is one whose link heals only after it was sent.
        """
        policy = self.link(src, dst)
        copies = 2 if policy.duplicate and self.rng.random() < policy.duplicate else 1
        for _ in range(copies):
            if self.isolated(src, dst) or (policy.drop and self.rng.random() < policy.drop):
                self.dropped += 1
                continue
            delay = self.rng.randint(policy.min_delay_ms, policy.max_delay_ms)
            delay += self.label_delays.get((src, dst, label), 0)

            def arrive(deliver: Callable[[], None] = deliver) -> None:
                if self.isolated(src, dst):
                    self.dropped += 1
                    return
                self.delivered += 1
                deliver()

            self.after(delay, arrive, label)
