"""Client quotas in the metadata image (KIP-13, KIP-124, KIP-599): entities, the quota keys, and
DescribeClientQuotas' matching, as Kafka's ClientQuotaImage / ClientQuotasImage.describe.

An entity is a set of (entity type, entity name) pairs, the name None for the type's default entity
(``--entity-default``): {user: alice}, {user: alice, client-id: None}, {ip: 10.0.0.1}. It is kept as a
tuple of pairs sorted by type, so the same entity is the same key whatever order a request names it in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

USER, CLIENT_ID, IP = "user", "client-id", "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

# Kafka's QuotaConfig keys
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"

# DescribeClientQuotas' ComponentData.match_type
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

QuotaEntity = tuple[tuple[str, str | None], ...]


def quota_entity(pairs: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """The entity of (type, name) pairs: sorted by type, so it is one key whatever the order given."""
    return tuple(sorted(pairs, key=lambda pair: pair[0]))


class DescribeError(Exception):
    """A DescribeClientQuotas filter Kafka refuses: INVALID_REQUEST, or UNSUPPORTED_VERSION for an entity
    type it does not know (ClientQuotasImage.describe)."""

    def __init__(self, unsupported: bool, message: str) -> None:
        super().__init__(message)
        self.unsupported = unsupported


def _filter(components: Iterable[tuple[str, int, str | None]]) -> tuple[dict[str, str | None], set[str]]:
    """(exact matches by type, types any specified name matches) of a filter, checked as Kafka does."""
    exact: dict[str, str | None] = {}
    typed: set[str] = set()
    for entity_type, match_type, match in components:
        if not entity_type:
            raise DescribeError(False, "Invalid empty entity type.")
        if entity_type in exact or entity_type in typed:
            raise DescribeError(
                False, f"Entity type {entity_type} cannot appear more than once in the filter."
            )
        if entity_type not in ENTITY_TYPES:
            raise DescribeError(True, f"Unsupported entity type {entity_type}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise DescribeError(
                    False, "Request specified MATCH_TYPE_EXACT, but set match string to null."
                )
            exact[entity_type] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise DescribeError(
                    False, "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                )
            exact[entity_type] = None
        elif match_type == MATCH_SPECIFIED:
            if match is not None:
                raise DescribeError(
                    False, "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                )
            typed.add(entity_type)
        else:
            raise DescribeError(False, f"Unknown match type {match_type}")
    named = exact.keys() | typed
    if IP in named and (USER in named or CLIENT_ID in named):
        raise DescribeError(
            False,
            "Invalid entity filter component combination. IP filter component should not be used with "
            "user or clientId filter component.",
        )
    return exact, typed


def _matches(entity: QuotaEntity, exact: dict[str, str | None], typed: set[str], strict: bool) -> bool:
    names = dict(entity)
    if strict and len(names) != len(exact) + len(typed):
        return False
    return all(t in names and names[t] == name for t, name in exact.items()) and all(
        t in names for t in typed
    )


def describe(
    quotas: Mapping[QuotaEntity, Mapping[str, float]],
    components: Iterable[tuple[str, int, str | None]],
    strict: bool,
) -> list[tuple[QuotaEntity, dict[str, float]]]:
    """The entities a DescribeClientQuotas filter matches, with their quotas (ClientQuotasImage.describe);
    DescribeError for a filter Kafka refuses."""
    exact, typed = _filter(components)
    return [
        (entity, dict(values)) for entity, values in quotas.items() if _matches(entity, exact, typed, strict)
    ]
