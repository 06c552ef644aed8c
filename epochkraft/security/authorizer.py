"""An authorizer with Kafka's StandardAuthorizer semantics (StandardAuthorizerData.authorize), sans-IO.

- ``super.users`` are allowed everything.
- ACLs match a resource by type and pattern: LITERAL (the exact name, or ``*`` for every name) or PREFIXED
  (names starting with it); a principal by itself or ``User:*``; a host by itself or ``*``.
- A matching DENY wins over any ALLOW. An ALLOW of READ, WRITE, DELETE or ALTER implies DESCRIBE, and of
  ALTER_CONFIGS implies DESCRIBE_CONFIGS (ALLOW only: a DENY names exactly what it denies); ALL matches
  every operation.
- A resource with no ACL at all (for anyone) is allowed only with ``allow.everyone.if.no.acl.found``;
  once a resource has ACLs, what they do not allow is denied.

The bindings come from AccessControlEntryRecords in the metadata log (``add``/``remove`` on replay).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

from epochkraft.security.principal import USER_TYPE, KafkaPrincipal

WILDCARD = "*"
CLUSTER_NAME = "kafka-cluster"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


class AclOperation(IntEnum):  # Kafka's AclOperation codes
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ResourceType(IntEnum):  # Kafka's ResourceType codes
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):  # Kafka's PatternType codes
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# AclEntry.supportedOperations: the operations an authorized-operations bitfield is made of, per resource type.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
}
# The schemas' default for authorized operations: what a response carries when they were not asked for.
OPERATIONS_NOT_REQUESTED = -(2**31)


def operations_bitfield(operations: Iterable[AclOperation]) -> int:
    """Utils.to32BitField: bit ``code`` set for each operation."""
    field = 0
    for operation in operations:
        field |= 1 << operation
    return field


_IMPLIES_DESCRIBE = {AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE}
_IMPLIES_DESCRIBE |= {AclOperation.DELETE, AclOperation.ALTER}
_IMPLIES_DESCRIBE_CONFIGS = {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL (Kafka's StandardAcl): a resource pattern and an access control entry."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str  # "User:alice" or "User:*"
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.resource_name in (name, WILDCARD)
        return self.pattern_type == PatternType.PREFIXED and name.startswith(self.resource_name)

    def decision(self, principal: KafkaPrincipal, host: str, operation: AclOperation) -> bool | None:
        """True (allowed), False (denied) or None (this ACL says nothing), as findResult."""
        wanted = {str(principal), f"{principal.principal_type}:{WILDCARD}"}
        if self.principal not in wanted:
            return None
        if self.host not in (WILDCARD, host):
            return None
        allow = self.permission_type == AclPermissionType.ALLOW
        if self.operation != AclOperation.ALL:
            if allow and operation == AclOperation.DESCRIBE:
                if self.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif allow and operation == AclOperation.DESCRIBE_CONFIGS:
                if self.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif operation != self.operation:
                return None
        return allow


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's AclBindingFilter: ANY/None match everything in their field; MATCH patterns match what
    would apply to the named resource (literal, wildcard and prefixes)."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and acl.resource_type != self.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is not None and not acl.matches_resource(
                acl.resource_type, self.resource_name
            ):
                return False
        else:
            if self.pattern_type != PatternType.ANY and acl.pattern_type != self.pattern_type:
                return False
            if self.resource_name is not None and acl.resource_name != self.resource_name:
                return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation != AclOperation.ANY and acl.operation != self.operation:
            return False
        return self.permission_type == AclPermissionType.ANY or acl.permission_type == self.permission_type


class AclImage(Protocol):
    @property
    def acls(self) -> dict[uuid.UUID, AclBinding]: ...


class StandardAuthorizer:
    """Decides ``authorize(principal, host, operation, resource_type, name)`` from the ACLs it holds."""

    def __init__(self, super_users: frozenset[KafkaPrincipal], allow_everyone_if_no_acl_found: bool) -> None:
        self.super_users = super_users
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.acls: dict[uuid.UUID, AclBinding] = {}

    def publish_acls(self, image: AclImage) -> None:
        """The ACLs of each metadata image a broker publishes (Kafka's AclPublisher)."""
        self.acls = image.acls

    def add(self, acl_id: uuid.UUID, acl: AclBinding) -> None:
        self.acls[acl_id] = acl

    def remove(self, acl_id: uuid.UUID) -> None:
        self.acls.pop(acl_id, None)

    def authorize(
        self,
        principal: KafkaPrincipal,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        has_resource_acls = False
        allowed = False
        for acl in self.acls.values():
            if not acl.matches_resource(resource_type, name):
                continue
            has_resource_acls = True
            decision = acl.decision(principal, host, operation)
            if decision is False:
                return False
            allowed = allowed or decision is True
        if allowed:
            return True
        return not has_resource_acls and self.allow_everyone_if_no_acl_found

    def authorize_by_resource_type(
        self, principal: KafkaPrincipal, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Whether some resource of the type allows the operation (Kafka's authorizeByResourceType): a super
        user, an ALLOW binding not matched by a DENY on the same pattern, or no ACL of that type at all with
        allow.everyone.if.no.acl.found."""
        if principal in self.super_users:
            return True
        of_type = [a for a in self.acls.values() if a.resource_type == resource_type]
        if not of_type:
            return self.allow_everyone_if_no_acl_found
        denied = {
            (a.resource_name, a.pattern_type)
            for a in of_type
            if a.permission_type == AclPermissionType.DENY and a.decision(principal, host, operation) is False
        }
        return any(
            a.permission_type == AclPermissionType.ALLOW
            and a.decision(principal, host, operation) is True
            and (a.resource_name, a.pattern_type) not in denied
            and (WILDCARD, PatternType.LITERAL) not in denied
            for a in of_type
        )

    def authorize_cluster(self, principal: KafkaPrincipal, host: str, operation: AclOperation) -> bool:
        return self.authorize(principal, host, operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def is_super_user(self, principal: KafkaPrincipal) -> bool:
        return principal in self.super_users


def user(name: str) -> str:
    return f"{USER_TYPE}:{name}"
