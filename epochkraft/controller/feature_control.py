"""Finalized features and UpdateFeatures, as Kafka's FeatureControlManager.

A feature's finalized level lives in the metadata log (FeatureLevelRecord, level 0 removes it) and in the
image's ``features``; ``decide_update_features`` turns an UpdateFeatures request into records and one
error for the whole request (Kafka 3.9+ applies a request's updates all or none), never touching state.
metadata.version is fixed at the level this code writes; eligible.leader.replicas.version (KIP-966) moves
between 0 and 1: up writes the cluster-level min.insync.replicas if there is none and removes every
broker-level one, down to 0 clears every partition's ELR. transaction.version (KIP-890) moves freely
between 0 and 2 (a downgrade needs a downgrade type): the brokers read it when they write
``__transaction_state``; each client picks its transactions' version from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from epochkraft.metadata.image import (
    ELR_VERSION,
    METADATA_VERSION,
    MIN_ELR_METADATA_VERSION,
    TRANSACTION_VERSION,
    MetadataImage,
)
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import FeatureLevelRecord

# The metadata.version written at bootstrap: 4.0-IV3, Kafka 4.0's, whose records carry the ELR (KIP-966).
METADATA_VERSION_LEVEL = 25
# Feature name -> (lowest, highest) level this code supports (brokers and controllers alike).
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    METADATA_VERSION: (7, METADATA_VERSION_LEVEL),
    ELR_VERSION: (0, 1),
    TRANSACTION_VERSION: (0, 2),  # Kafka's TransactionVersion TV_0..TV_2 (KIP-890)
}


class UpgradeType(IntEnum):
    """UpdateFeatures' upgrade_type (FeatureUpdate.UpgradeType)."""

    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    feature: str
    level: int
    upgrade_type: int


def _invalid(update: FeatureUpdate, why: str) -> tuple[ErrorCode, str]:
    return ErrorCode.invalid_update_version, (
        f"Invalid update version {update.level} for feature {update.feature}. {why}"
    )


def _check(image: MetadataImage, update: FeatureUpdate) -> tuple[ErrorCode, str] | None:
    """Kafka's FeatureControlManager.updateFeature checks, in its order."""
    if update.upgrade_type not in tuple(UpgradeType):
        return ErrorCode.invalid_update_version, f"Unknown upgrade type {update.upgrade_type}."
    supported = SUPPORTED_FEATURES.get(update.feature)
    if supported is None:
        return _invalid(update, "The controller does not support the given feature.")
    if update.level < 0:
        return _invalid(update, "A feature version cannot be less than 0.")
    current = image.features.get(update.feature, 0)
    if update.feature == METADATA_VERSION and update.level != current:
        return _invalid(update, f"This controller supports only metadata.version {current}.")
    low, high = supported
    if update.level != 0 and not low <= update.level <= high:
        return _invalid(update, f"The controller supports versions {low}-{high}.")
    if update.level < current and update.upgrade_type == UpgradeType.UPGRADE:
        return _invalid(
            update,
            "Can't downgrade the version of this feature without setting the upgrade type to either "
            "safe or unsafe downgrade.",
        )
    metadata_version = image.features.get(METADATA_VERSION, 0)
    if update.feature == ELR_VERSION and update.level >= 1 and metadata_version < MIN_ELR_METADATA_VERSION:
        # The feature's dependency (Kafka's EligibleLeaderReplicasVersion.ELRV_1 needs 4.0-IV1): the
        # records of an older metadata.version carry no ELR, which would stay off while reported on.
        return _invalid(
            update,
            f"{ELR_VERSION} {update.level} depends on {METADATA_VERSION} {MIN_ELR_METADATA_VERSION} or "
            f"above; the finalized {METADATA_VERSION} is {metadata_version}.",
        )
    return None


def decide_update_features(
    image: MetadataImage,
    updates: list[FeatureUpdate],
    *,
    elr_safety_records: Callable[[], list],
    clear_elr_records: Callable[[], list],
) -> tuple[ErrorCode, str | None, list]:
    """(error, message, records): all of the request's updates, or none of them."""
    seen: set[str] = set()
    records: list = []
    for update in updates:
        if update.feature in seen:
            return ErrorCode.invalid_request, f"Feature {update.feature} named more than once.", []
        seen.add(update.feature)
        if (refusal := _check(image, update)) is not None:
            return refusal[0], refusal[1], []
        if image.features.get(update.feature, 0) == update.level:
            continue
        records.append(FeatureLevelRecord(name=update.feature, feature_level=update.level))
        if update.feature == ELR_VERSION and update.level >= 1:
            records += elr_safety_records()
        elif update.feature == ELR_VERSION:
            records += clear_elr_records()
    return ErrorCode.none, None, records
