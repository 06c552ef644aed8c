"""The broker's client quotas, sans-IO (time comes in as an argument): Kafka's ClientQuotaManager (KIP-13
produce and fetch byte rates), ClientRequestQuotaManager (KIP-124 request_percentage) and
ControllerMutationQuotaManager (KIP-599 controller_mutation_rate), with the DefaultQuotaCallback's
precedence over the quotas the metadata image holds.

A client is (user, client id): the principal's name and the request header's client id. Its quota is the
first set of, in Kafka's order: user and client id, user and default client id, user alone, default user
and client id, default user and default client id, default user alone, client id alone, default client id.
The rate it is measured by is shared by every client that entity covers: a quota on user alice is one rate
for all of alice's client ids (the metric tags of ``metric_tags``). Nothing is measured while no quota of
a type is set, so the produce and fetch paths cost one comparison then.

What a quota manager answers is a throttle time; the server puts it in the response (throttle_time_ms)
and, KIP-219, stops reading the connection for that long once the response is sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from epochkraft.broker.quota_stats import QUOTA_WINDOW_NUM, QUOTA_WINDOW_SIZE_MS, Rate, TokenBucket
from epochkraft.metadata.client_quotas import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    QuotaEntity,
)

# An override's key: (user part, client-id part), each the name, None for the default entity, or ABSENT
# when the entity has no such type (Kafka's KafkaQuotaEntity with an empty Option).
ABSENT = ""
OverrideKey = tuple[str | None, str | None]
Tags = tuple[str, str]  # (user tag, client-id tag): "" where the rate is not per user / per client id
INACTIVE_SENSOR_EXPIRATION_MS = 3_600_000  # ClientQuotaManager.InactiveSensorExpirationTimeSeconds
EXPIRY_CHECK_INTERVAL_MS = 60_000
NANOS_TO_PERCENTAGE_PER_SECOND = 100.0 / 1e9  # ClientRequestQuotaManager.NanosToPercentagePerSecond

# QuotaTypes bits: which kinds of entity have a quota of this type
CLIENT_ID_QUOTAS, USER_QUOTAS, USER_CLIENT_ID_QUOTAS = 1, 2, 4


def _override_key(entity: QuotaEntity) -> OverrideKey | None:
    """The (user, client-id) key of an entity, None for an ip entity (not a client quota)."""
    names = dict(entity)
    if USER not in names and CLIENT_ID not in names:
        return None
    return names.get(USER, ABSENT), names.get(CLIENT_ID, ABSENT)


class ClientQuotaManager:
    """The quotas of one key (``producer_byte_rate``...) and the rates they are checked against."""

    def __init__(
        self,
        key: str,
        samples: int = QUOTA_WINDOW_NUM,
        window_ms: int = QUOTA_WINDOW_SIZE_MS,
        max_throttle_ms: int | None = None,
    ) -> None:
        self.key = key
        self.samples = samples
        self.window_ms = window_ms
        self.max_throttle_ms = max_throttle_ms
        self.overrides: dict[OverrideKey, float] = {}
        self.types_enabled = 0
        self._rates: dict[Tags, tuple[Rate, list[int]]] = {}  # rate and its last record time
        self._next_expiry_ms = 0

    @property
    def enabled(self) -> bool:
        return self.types_enabled != 0

    def update(self, quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """Takes the quotas of our key from the image's (replayed ClientQuotaRecords)."""
        overrides: dict[OverrideKey, float] = {}
        types = 0
        for entity, values in quotas.items():
            value = values.get(self.key)
            key = _override_key(entity)
            if value is None or key is None:
                continue
            overrides[key] = value
            user, client_id = key
            if user != ABSENT:
                types |= USER_CLIENT_ID_QUOTAS if client_id != ABSENT else USER_QUOTAS
            else:
                types |= CLIENT_ID_QUOTAS
        self.overrides = overrides
        self.types_enabled = types

    def metric_tags(self, user: str, client_id: str) -> Tags:
        """Whose rate a client's requests count against (DefaultQuotaCallback.quotaMetricTags)."""
        types = self.types_enabled
        if types in (0, CLIENT_ID_QUOTAS):
            return ABSENT, client_id
        if types == USER_QUOTAS:
            return user, ABSENT
        if types == USER_CLIENT_ID_QUOTAS:
            return user, client_id
        has = self.overrides.__contains__
        if has((user, client_id)) or has((user, None)):
            return user, client_id
        if has((user, ABSENT)):
            return user, ABSENT
        if has((None, client_id)) or has((None, None)):
            return user, client_id
        if has((None, ABSENT)):
            return user, ABSENT
        return ABSENT, client_id

    def quota_limit(self, tags: Tags) -> float | None:
        """The quota of a rate's tags (DefaultQuotaCallback.quotaLimit); None: no quota."""
        user, client_id = tags
        if user and client_id:
            candidates: tuple[OverrideKey, ...] = (
                (user, client_id),
                (user, None),
                (None, client_id),
                (None, None),
            )
        elif user:
            candidates = ((user, ABSENT), (None, ABSENT))
        elif client_id:
            candidates = ((ABSENT, client_id), (ABSENT, None))
        else:
            return None
        for candidate in candidates:
            value = self.overrides.get(candidate)
            if value is not None:
                return value
        return None

    def quota(self, user: str, client_id: str) -> float | None:
        return self.quota_limit(self.metric_tags(user, client_id))

    def max_value_in_quota_window(self, user: str, client_id: str) -> float:
        """The most a client may take in one response without being throttled for good: its quota over
        ``samples - 1`` windows (ClientQuotaManager.getMaxValueInQuotaWindow); infinite without a quota. A
        Fetch is capped by it, so a backlog larger than the window is read in parts, not refused forever."""
        limit = self.quota(user, client_id) if self.types_enabled else None
        if limit is None:
            return float("inf")
        return limit * (self.samples - 1) * self.window_ms / 1000

    def _rate(self, tags: Tags, now_ms: int) -> Rate:
        entry = self._rates.get(tags)
        if entry is None:
            self._expire(now_ms)
            entry = self._rates[tags] = (Rate(self.samples, self.window_ms), [now_ms])
        entry[1][0] = now_ms
        return entry[0]

    def _expire(self, now_ms: int) -> None:
        """Forgets rates idle for an hour, as Kafka's sensors expire, so many client ids come and go
        without the broker holding a rate for each for ever."""
        if now_ms < self._next_expiry_ms:
            return
        self._next_expiry_ms = now_ms + EXPIRY_CHECK_INTERVAL_MS
        idle = [
            tags
            for tags, (_, last) in self._rates.items()
            if now_ms - last[0] > INACTIVE_SENSOR_EXPIRATION_MS
        ]
        for tags in idle:
            del self._rates[tags]

    def record(self, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Records ``value`` for the client; the throttle time in ms if its rate is now over its quota
        (ClientQuotaManager.recordAndGetThrottleTimeMs), else 0."""
        if not self.types_enabled:
            return 0
        tags = self.metric_tags(user, client_id)
        limit = self.quota_limit(tags)
        if limit is None:
            return 0
        rate = self._rate(tags, now_ms)
        rate.record(value, now_ms)
        total, window_ms = rate.total_and_window_ms(now_ms)
        observed = total / (window_ms / 1000)
        if observed <= limit:
            return 0
        # QuotaUtils.throttleTime: how long until the average over the window is back at the quota
        throttle = round((observed - limit) / limit * window_ms)
        return throttle if self.max_throttle_ms is None else min(throttle, self.max_throttle_ms)

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Takes back a recorded value (a fetch answered empty because it was throttled)."""
        entry = self._rates.get(self.metric_tags(user, client_id))
        if entry is not None:
            entry[0].unrecord(value, now_ms)

    def observed(self, user: str, client_id: str, now_ms: int) -> float:
        entry = self._rates.get(self.metric_tags(user, client_id))
        return 0.0 if entry is None else entry[0].measure(now_ms)


class ClientRequestQuotaManager(ClientQuotaManager):
    """KIP-124: request_percentage, the share of one request handler's time a client may take; we measure
    the time the event loop spends running the client's requests. A throttle is at most one window."""

    def __init__(self, samples: int = QUOTA_WINDOW_NUM, window_ms: int = QUOTA_WINDOW_SIZE_MS) -> None:
        super().__init__(REQUEST_PERCENTAGE, samples, window_ms, max_throttle_ms=window_ms)

    def record_time(self, user: str, client_id: str, busy_ns: int, now_ms: int) -> int:
        return self.record(user, client_id, busy_ns * NANOS_TO_PERCENTAGE_PER_SECOND, now_ms)


class ControllerMutationQuota:
    """One request's controller mutation quota (Kafka's Strict/Permissive/UnboundedControllerMutationQuota):
    ``record(partitions)`` False means THROTTLING_QUOTA_EXCEEDED for that topic (strict only)."""

    def __init__(self, bucket: TokenBucket | None, rate: float, now_ms: int, strict: bool) -> None:
        self.bucket = bucket  # None: unbounded
        self.rate = rate
        self.now_ms = now_ms
        self.strict = strict
        self.throttle_ms = 0

    def _violated(self, tokens: float) -> None:
        # ControllerMutationQuotaManager.throttleTimeMs: the time to refill the deficit
        self.throttle_ms = round(-tokens / self.rate * 1000)

    def record(self, partitions: float) -> bool:
        if self.bucket is None:
            return True
        if self.strict:
            tokens = self.bucket.measure(self.rate, self.now_ms)
            if tokens < 0:  # checked before recording: the request that empties the bucket goes through
                self._violated(tokens)
                return False
            self.bucket.record(partitions, self.rate, self.now_ms)
            return True
        self.bucket.record(partitions, self.rate, self.now_ms)
        tokens = self.bucket.measure(self.rate, self.now_ms)
        if tokens < 0:
            self._violated(tokens)
        return True

    @property
    def exceeded(self) -> bool:
        return self.strict and self.throttle_ms > 0

    def throttle_time_ms(self, now_ms: int) -> int:
        """The throttle time less what has passed since it was recorded."""
        return max(0, self.throttle_ms - (now_ms - self.now_ms))


class ControllerMutationQuotaManager(ClientQuotaManager):
    """KIP-599: controller_mutation_rate, partitions created or deleted a second, as a token bucket per
    client (a burst of quota.window.num windows' worth)."""

    def __init__(self, samples: int = QUOTA_WINDOW_NUM, window_ms: int = QUOTA_WINDOW_SIZE_MS) -> None:
        super().__init__(CONTROLLER_MUTATION_RATE, samples, window_ms)
        self._buckets: dict[Tags, tuple[TokenBucket, list[int]]] = {}  # bucket and its last use
        self._next_bucket_expiry_ms = 0

    def new_quota_for(
        self, user: str, client_id: str, api_version: int, strict_since: int, now_ms: int
    ) -> ControllerMutationQuota:
        """Strict from ``strict_since`` on (the versions whose clients know THROTTLING_QUOTA_EXCEEDED),
        permissive below, unbounded without a quota (newQuotaFor)."""
        tags = self.metric_tags(user, client_id)
        limit = self.quota_limit(tags) if self.types_enabled else None
        if limit is None:
            return ControllerMutationQuota(None, 0.0, now_ms, strict=False)
        entry = self._buckets.get(tags)
        if entry is None:
            self._expire_buckets(now_ms)
            bucket = TokenBucket(self.samples, self.window_ms)
            bucket.tokens = self.samples * self.window_ms / 1000 * limit  # a new client starts with its burst
            bucket.measure(limit, now_ms)  # starts refilling now
            entry = self._buckets[tags] = (bucket, [now_ms])
        bucket = entry[0]
        entry[1][0] = now_ms
        return ControllerMutationQuota(bucket, limit, now_ms, strict=api_version >= strict_since)

    def _expire_buckets(self, now_ms: int) -> None:
        """Forgets buckets idle for an hour, as Kafka's sensors expire (a bucket idle that long is full, as
        a new one starts), so client ids coming and going leave nothing behind."""
        if now_ms < self._next_bucket_expiry_ms:
            return
        self._next_bucket_expiry_ms = now_ms + EXPIRY_CHECK_INTERVAL_MS
        idle = [
            tags
            for tags, (_, last) in self._buckets.items()
            if now_ms - last[0] > INACTIVE_SENSOR_EXPIRATION_MS
        ]
        for tags in idle:
            del self._buckets[tags]


class QuotaImage(Protocol):
    """What the quota managers read of the metadata image."""

    @property
    def client_quotas(self) -> Mapping[QuotaEntity, Mapping[str, float]]: ...
    @property
    def client_quotas_version(self) -> int: ...


class ClientQuotas:
    """The broker's quota managers, following the quotas of the metadata image ``current_image`` gives
    (the one published last: read once per check)."""

    def __init__(
        self,
        current_image: Callable[[], QuotaImage] | None = None,
        samples: int = QUOTA_WINDOW_NUM,
        window_ms: int = QUOTA_WINDOW_SIZE_MS,
    ) -> None:
        self.current_image = current_image
        self.any_enabled = False
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE, samples, window_ms)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE, samples, window_ms)
        self.request = ClientRequestQuotaManager(samples, window_ms)
        self.controller_mutation = ControllerMutationQuotaManager(samples, window_ms)
        self._version = -1

    def active(self) -> bool:
        """True if any quota is set in the image followed (re-read only when its quotas changed): the one
        check the request path makes while there is none."""
        if self.current_image is None:
            return self.any_enabled
        image = self.current_image()
        if image.client_quotas_version != self._version:
            self.refresh(image.client_quotas, image.client_quotas_version)
        return self.any_enabled

    def refresh(self, quotas: Mapping[QuotaEntity, Mapping[str, float]], version: int) -> bool:
        """Takes the image's quotas when they changed (``version``); True if any quota is set."""
        if version != self._version:
            self._version = version
            for manager in (self.produce, self.fetch, self.request, self.controller_mutation):
                manager.update(quotas)
        self.any_enabled = bool(
            self.produce.types_enabled
            or self.fetch.types_enabled
            or self.request.types_enabled
            or self.controller_mutation.types_enabled
        )
        return self.any_enabled
