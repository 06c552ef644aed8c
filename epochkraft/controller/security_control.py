"""SCRAM credentials and ACLs in the metadata log: the controller's decisions, as Kafka's
ScramControlManager.alterCredentials and AclControlManager.createAcls/deleteAcls. Each returns the records
to commit and the response; the image changes only when the records are replayed (UserScramCredentialRecord,
RemoveUserScramCredentialRecord, AccessControlEntryRecord, RemoveAccessControlEntryRecord), so a controller
restart rebuilds credentials and ACLs from the log."""

from __future__ import annotations

import hashlib
import hmac
import uuid
from typing import Protocol

from kio.schema.alter_user_scram_credentials.v0 import response as scram_resp
from kio.schema.alter_user_scram_credentials.v0.request import AlterUserScramCredentialsRequest
from kio.schema.create_acls.v3 import response as create_resp
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.delete_acls.v3 import response as delete_resp
from kio.schema.delete_acls.v3.request import DeleteAclsRequest
from kio.static.primitive import i8

from epochkraft.metadata.image import MetadataImage
from epochkraft.metadata.snapshot import acl_record
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.metadata_records import (
    MetadataRecord,
    RemoveAccessControlEntryRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from epochkraft.security.authorizer import (
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from epochkraft.security.principal import KafkaPrincipal
from epochkraft.security.scram import MAX_ITERATIONS, MECHANISM_NAMES, MECHANISMS, ScramCredential

Records = list[MetadataRecord]


class AclFilterFields(Protocol):
    """A DescribeAcls request's filter fields, as a DeleteAcls filter's."""

    @property
    def resource_type_filter(self) -> i8: ...
    @property
    def resource_name_filter(self) -> str | None: ...
    @property
    def pattern_type_filter(self) -> i8: ...
    @property
    def principal_filter(self) -> str | None: ...
    @property
    def host_filter(self) -> str | None: ...
    @property
    def operation(self) -> i8: ...
    @property
    def permission_type(self) -> i8: ...


def scram_record(user: str, mechanism: int, credential: ScramCredential) -> UserScramCredentialRecord:
    return UserScramCredentialRecord(
        name=user,
        mechanism=mechanism,
        salt=credential.salt,
        stored_key=credential.stored_key,
        server_key=credential.server_key,
        iterations=credential.iterations,
    )


def _result(
    user: str, error: ErrorCode, message: str | None = None
) -> scram_resp.AlterUserScramCredentialsResult:
    return scram_resp.AlterUserScramCredentialsResult(user=user, error_code=error, error_message=message)


def alter_scram_credentials(
    image: MetadataImage, request: AlterUserScramCredentialsRequest
) -> tuple[Records, list[scram_resp.AlterUserScramCredentialsResult]]:
    """AlterUserScramCredentials: upsertions carry the salted password, from which StoredKey and ServerKey
    are derived (ScramFormatter); a user named twice is DUPLICATE_RESOURCE, an unknown mechanism
    UNSUPPORTED_SASL_MECHANISM, iterations out of range UNACCEPTABLE_CREDENTIAL, deleting what does not
    exist RESOURCE_NOT_FOUND; an empty user name is UNACCEPTABLE_CREDENTIAL before any of these, as Kafka
    4.4.0 answers (tests/test_differential.py)."""
    names = [item.name for item in request.deletions] + [item.name for item in request.upsertions]
    counts: dict[str, int] = {}
    for user in names:
        counts[user] = counts.get(user, 0) + 1
    records: Records = []
    results: dict[str, scram_resp.AlterUserScramCredentialsResult] = {}
    for user in names:
        if not user:  # before any other check, as Kafka answers it
            results[user] = _result(user, ErrorCode.unacceptable_credential, "Username must not be empty")
    for deletion in request.deletions:
        if deletion.name in results:
            continue
        if counts[deletion.name] > 1:
            results[deletion.name] = _result(
                deletion.name,
                ErrorCode.duplicate_resource,
                "A user credential cannot be altered twice in the same request",
            )
        elif deletion.mechanism not in MECHANISM_NAMES:
            results[deletion.name] = _result(
                deletion.name, ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
            )
        elif (deletion.name, deletion.mechanism) not in image.scram_credentials:
            results[deletion.name] = _result(
                deletion.name,
                ErrorCode.resource_not_found,
                "Attempt to delete a user credential that does not exist",
            )
        else:
            records.append(RemoveUserScramCredentialRecord(name=deletion.name, mechanism=deletion.mechanism))
            results[deletion.name] = _result(deletion.name, ErrorCode.none)
    for item in request.upsertions:
        if item.name in results:
            continue
        if counts[item.name] > 1:
            results[item.name] = _result(
                item.name,
                ErrorCode.duplicate_resource,
                "A user credential cannot be altered twice in the same request",
            )
            continue
        name = MECHANISM_NAMES.get(item.mechanism)
        if name is None:
            results[item.name] = _result(
                item.name, ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
            )
            continue
        minimum = MECHANISMS[name][2]
        if item.iterations < minimum:
            results[item.name] = _result(item.name, ErrorCode.unacceptable_credential, "Too few iterations")
            continue
        if item.iterations > MAX_ITERATIONS:
            results[item.name] = _result(item.name, ErrorCode.unacceptable_credential, "Too many iterations")
            continue
        hash_name = MECHANISMS[name][1]
        client_key = hmac.new(item.salted_password, b"Client Key", hash_name).digest()
        credential = ScramCredential(
            salt=item.salt,
            stored_key=hashlib.new(hash_name, client_key).digest(),
            server_key=hmac.new(item.salted_password, b"Server Key", hash_name).digest(),
            iterations=item.iterations,
        )
        records.append(scram_record(item.name, item.mechanism, credential))
        results[item.name] = _result(item.name, ErrorCode.none)
    return records, list(results.values())


def _binding(item: AclCreation) -> AclBinding | str:
    """A new ACL from a CreateAcls creation, or why it is invalid (AclControlManager.validateNewAcl)."""
    try:
        resource_type = ResourceType(item.resource_type)
        pattern_type = PatternType(item.resource_pattern_type)
        operation = AclOperation(item.operation)
        permission = AclPermissionType(item.permission_type)
    except ValueError:
        return "Invalid resource type, pattern type, operation or permission type"
    if resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return "Invalid resource type"
    if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return "Invalid pattern type"
    if operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return "Invalid operation"
    if permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return "Invalid permission type"
    if not item.resource_name:
        return "Resource name should not be empty"
    try:
        KafkaPrincipal.parse(item.principal)
    except ValueError:
        return f"Could not parse principal from `{item.principal}`"
    if item.host is None or not item.host:
        return "Invalid host"
    return AclBinding(
        resource_type, item.resource_name, pattern_type, item.principal, item.host, operation, permission
    )


def create_acls(
    image: MetadataImage, request: CreateAclsRequest
) -> tuple[Records, list[create_resp.AclCreationResult]]:
    existing = {binding: acl_id for acl_id, binding in image.acls.items()}
    records: Records = []
    results = []
    for item in request.creations:
        binding = _binding(item)
        if isinstance(binding, str):
            results.append(
                create_resp.AclCreationResult(error_code=ErrorCode.invalid_request, error_message=binding)
            )
            continue
        if binding not in existing:  # an ACL that already exists is created once
            acl_id = uuid.uuid4()
            existing[binding] = acl_id
            records.append(acl_record(acl_id, binding))
        results.append(create_resp.AclCreationResult(error_code=ErrorCode.none, error_message=None))
    return records, results


def acl_filter(item: AclFilterFields) -> AclFilter:
    """A DescribeAcls request or DeleteAcls filter -> AclFilter (null strings match anything)."""
    return AclFilter(
        resource_type=ResourceType(item.resource_type_filter),
        resource_name=item.resource_name_filter,
        pattern_type=PatternType(item.pattern_type_filter),
        principal=item.principal_filter,
        host=item.host_filter,
        operation=AclOperation(item.operation),
        permission_type=AclPermissionType(item.permission_type),
    )


def delete_acls(
    image: MetadataImage, request: DeleteAclsRequest
) -> tuple[Records, list[delete_resp.DeleteAclsFilterResult]]:
    records: Records = []
    deleted: set[uuid.UUID] = set()
    results = []
    for item in request.filters:
        try:
            wanted = acl_filter(item)
        except ValueError:
            results.append(
                delete_resp.DeleteAclsFilterResult(
                    error_code=ErrorCode.invalid_request, error_message="Invalid filter", matching_acls=()
                )
            )
            continue
        matching = []
        for acl_id, binding in image.acls.items():
            if not wanted.matches(binding):
                continue
            if acl_id not in deleted:
                deleted.add(acl_id)
                records.append(RemoveAccessControlEntryRecord(id=acl_id))
            matching.append(
                delete_resp.DeleteAclsMatchingAcl(
                    error_code=ErrorCode.none,
                    error_message=None,
                    resource_type=i8(binding.resource_type),
                    resource_name=binding.resource_name,
                    pattern_type=i8(binding.pattern_type),
                    principal=binding.principal,
                    host=binding.host,
                    operation=i8(binding.operation),
                    permission_type=i8(binding.permission_type),
                )
            )
        results.append(
            delete_resp.DeleteAclsFilterResult(
                error_code=ErrorCode.none, error_message=None, matching_acls=tuple(matching)
            )
        )
    return records, results
