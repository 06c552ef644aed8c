"""The measures quotas are checked against, sans-IO (time is an argument): Kafka's Rate over a SampledStat
(``quota.window.num`` samples of ``quota.window.size.seconds``) and its TokenBucket (KIP-599)."""

from __future__ import annotations

from dataclasses import dataclass

QUOTA_WINDOW_NUM = 11  # Kafka's quota.window.num
QUOTA_WINDOW_SIZE_MS = 1000  # Kafka's quota.window.size.seconds, in ms


@dataclass(slots=True)
class _Sample:
    start_ms: int
    last_event_ms: int
    value: float = 0.0

    def reset(self, now_ms: int) -> None:
        self.start_ms = self.last_event_ms = now_ms
        self.value = 0.0


class Rate:
    """Kafka's ``Rate`` of a ``SampledStat`` (a sum per sample), per second: a ring of ``samples`` windows
    of ``window_ms``, the oldest reused when a new one starts (SampledStat.advance); samples idle for the
    whole span are reset, and the rate is the total over the time since the oldest sample began, counted as
    at least ``samples - 1`` full windows so that a first burst is not divided by a few milliseconds
    (Rate.windowSize)."""

    __slots__ = ("_current", "_samples", "samples", "window_ms")

    def __init__(self, samples: int = QUOTA_WINDOW_NUM, window_ms: int = QUOTA_WINDOW_SIZE_MS) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:  # SampledStat.Sample.isComplete
            sample = self._advance(now_ms)
        sample.value += value
        sample.last_event_ms = now_ms

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms, now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        self._current = (self._current + 1) % self.samples  # SampledStat.advance
        if self._current >= len(self._samples):
            self._samples.append(_Sample(now_ms, now_ms))
        else:
            self._samples[self._current].reset(now_ms)
        return self._samples[self._current]

    def total_and_window_ms(self, now_ms: int) -> tuple[float, int]:
        """(the total of the samples, the span in ms it is divided by) at ``now_ms``, in one pass: samples
        idle for the whole span reset first (SampledStat.purgeObsoleteSamples), then Rate.windowSize."""
        expire_age = self.samples * self.window_ms
        total = 0.0
        oldest = now_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire_age:
                sample.reset(now_ms)
            total += sample.value
            if sample.start_ms < oldest:
                oldest = sample.start_ms
        elapsed = now_ms - oldest
        full_windows = elapsed // self.window_ms
        if full_windows < self.samples - 1:
            elapsed += (self.samples - 1 - full_windows) * self.window_ms
        return total, max(elapsed, 1)

    def window_size_ms(self, now_ms: int) -> int:
        """Rate.windowSize: the span the total is divided by."""
        return self.total_and_window_ms(now_ms)[1]

    def measure(self, now_ms: int) -> float:
        """The rate per second at ``now_ms``."""
        total, window = self.total_and_window_ms(now_ms)
        return total / (window / 1000)

    def unrecord(self, value: float, now_ms: int) -> None:
        """Takes back a value recorded at ``now_ms`` (Kafka's ClientQuotaManager.unrecordQuotaSensor
        records its negative)."""
        self.record(-value, now_ms)


class TokenBucket:
    """Kafka's TokenBucket (KIP-599): ``rate`` tokens a second up to a burst of ``samples * window`` seconds'
    worth; a record takes tokens and may take the bucket below zero, which is what makes it exceeded."""

    __slots__ = ("_last_update_ms", "samples", "tokens", "window_ms")

    def __init__(self, samples: int = QUOTA_WINDOW_NUM, window_ms: int = QUOTA_WINDOW_SIZE_MS) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self.tokens = 0.0
        self._last_update_ms = 0

    def _refill(self, rate: float, now_ms: int) -> None:
        burst = self.samples * self.window_ms / 1000 * rate
        self.tokens = min(burst, self.tokens + rate * (now_ms - self._last_update_ms) / 1000)
        self._last_update_ms = now_ms

    def measure(self, rate: float, now_ms: int) -> float:
        self._refill(rate, now_ms)
        return self.tokens

    def record(self, value: float, rate: float, now_ms: int) -> None:
        self._refill(rate, now_ms)
        burst = self.samples * self.window_ms / 1000 * rate
        self.tokens = min(burst, self.tokens - value)
