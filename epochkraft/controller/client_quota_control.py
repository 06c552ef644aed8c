"""AlterClientQuotas decided as Kafka's ClientQuotaControlManager.alterClientQuotas: per entity, the
ClientQuotaRecords to commit and its error. Nothing changes until the records are replayed into the image.

Validation, in Kafka's order: a key named twice for an entity (INVALID_REQUEST, "Duplicate quota key"),
an entity named twice in the request ("Ignoring duplicate entity"), then the entity (known types user,
client-id and ip; no type twice; no empty name), the combination of types (ip alone; user and client-id
together or apart) and each key and value (a key of that combination; > 0; integral for the LONG and INT
keys). A record is written only for a value that changes; removing a key not set writes nothing.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence

from epochkraft.metadata.client_quotas import (
    CLIENT_ID,
    CONNECTION_CREATION_RATE,
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    IP,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    QuotaEntity,
    quota_entity,
)
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import ClientQuotaRecord, EntityData

LONG_MAX, INT_MAX = 2**63 - 1, 2**31 - 1
# Kafka's QuotaConfig.userAndClientQuotaConfigs() and ipConfigs(): key -> the largest integral value, or
# None for a DOUBLE key
USER_AND_CLIENT_KEYS: dict[str, int | None] = {
    PRODUCER_BYTE_RATE: LONG_MAX,
    CONSUMER_BYTE_RATE: LONG_MAX,
    REQUEST_PERCENTAGE: None,
    CONTROLLER_MUTATION_RATE: None,
}
IP_KEYS: dict[str, int | None] = {CONNECTION_CREATION_RATE: INT_MAX}

Error = tuple[ErrorCode, str | None]
OK: Error = (ErrorCode.none, None)
# One alteration: the entity's (type, name) pairs as the request listed them, and (key, value or None to
# remove) per op
Alteration = tuple[Sequence[tuple[str, str | None]], Sequence[tuple[str, float | None]]]


def _invalid(message: str) -> Error:
    return ErrorCode.invalid_request, message


def _describe(pairs: Sequence[tuple[str, str | None]]) -> str:
    return "ClientQuotaEntity(entries={" + ", ".join(f"{t}={n}" for t, n in pairs) + "})"


def validate_entity(pairs: Sequence[tuple[str, str | None]]) -> Error:
    """Kafka's validateEntity: known types, each once, no empty name."""
    if not pairs:
        return _invalid("Invalid empty client quota entity")
    seen: set[str] = set()
    for entity_type, name in pairs:
        if entity_type in seen:
            return _invalid(f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_type not in (USER, CLIENT_ID, IP):
            return _invalid(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            return _invalid(f"Empty {entity_type} not supported")
        seen.add(entity_type)
    return OK


def is_valid_ip_entity(name: str | None) -> bool:
    """An IP address or the default (None). Kafka also resolves host names; we do not look names up (a
    sans-IO controller), so only literal addresses are accepted."""
    if name is None:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def config_keys_for_entity(types: Mapping[str, str | None]) -> tuple[Error, dict[str, int | None]]:
    """Kafka's configKeysForEntityType: the keys an entity's combination of types may set."""
    if IP in types:
        if USER in types or CLIENT_ID in types:
            return _invalid(
                "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
            ), {}
        if not is_valid_ip_entity(types[IP]):
            return _invalid(f"{types[IP]} is not a valid IP or resolvable host."), {}
        return OK, IP_KEYS
    if USER in types or CLIENT_ID in types:
        return OK, USER_AND_CLIENT_KEYS
    return _invalid("Invalid empty client quota entity"), {}


def validate_quota_value(keys: Mapping[str, int | None], key: str, value: float) -> Error:
    """Kafka's validateQuotaKeyValue."""
    if key not in keys:
        return _invalid(f"Invalid configuration key {key}")
    if value <= 0.0:
        return _invalid(f"Quota {key} must be greater than 0")
    largest = keys[key]
    if largest is None:  # a DOUBLE key
        return OK
    if value > largest:
        kind = "an INT" if largest == INT_MAX else "a LONG"
        return _invalid(f"Proposed value for {key} is too large for {kind}.")
    if abs(value % 1.0) > 1e-6:
        return _invalid(f"{key} cannot be a fractional value.")
    return OK


def _alter_entity(
    pairs: Sequence[tuple[str, str | None]],
    ops: Mapping[str, float | None],
    current: Mapping[str, float],
) -> tuple[Error, list[ClientQuotaRecord]]:
    error = validate_entity(pairs)
    if error != OK:
        return error, []
    error, keys = config_keys_for_entity(dict(pairs))
    if error != OK:
        return error, []
    entity_data = tuple(EntityData(entity_type=t, entity_name=n) for t, n in pairs)
    records = []
    for key, value in ops.items():
        if value is None:
            if key in current:
                records.append(ClientQuotaRecord(entity=entity_data, key=key, remove=True))
            continue
        error = validate_quota_value(keys, key, value)
        if error != OK:
            return error, []
        if current.get(key) != value:  # only a value that changes is written
            records.append(ClientQuotaRecord(entity=entity_data, key=key, value=value))
    return OK, records


def alter_client_quotas(
    quotas: Mapping[QuotaEntity, Mapping[str, float]], alterations: Sequence[Alteration]
) -> tuple[list[ClientQuotaRecord], dict[QuotaEntity, Error]]:
    """Kafka's alterClientQuotas: the records for every valid alteration, and each entity's error."""
    records: list[ClientQuotaRecord] = []
    results: dict[QuotaEntity, Error] = {}
    for pairs, ops in alterations:
        entity = quota_entity(pairs)
        by_key: dict[str, float | None] = {}
        for key, value in ops:
            if key in by_key:
                results[entity] = _invalid(
                    f"Duplicate quota key {key} not updating quota for this entity {_describe(pairs)}"
                )
            else:
                by_key[key] = value
        if entity in results:
            results[entity] = _invalid(f"Ignoring duplicate entity {_describe(pairs)}")
            continue
        results[entity], new = _alter_entity(pairs, by_key, quotas.get(entity, {}))
        records.extend(new)
    return records, results
