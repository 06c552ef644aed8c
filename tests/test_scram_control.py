"""The controller's SCRAM credential decisions (security_control.alter_scram_credentials), as Kafka's
ScramControlManager.alterCredentials answers them."""

from __future__ import annotations

from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.static.primitive import i8, i32

from epochkraft.controller import security_control
from epochkraft.metadata.image import MetadataImage
from epochkraft.protocol.errors import ErrorCode

SCRAM_SHA_256 = i8(1)


def upsertion(name: str, iterations: int = 4096) -> ScramCredentialUpsertion:
    return ScramCredentialUpsertion(
        name=name,
        mechanism=SCRAM_SHA_256,
        iterations=i32(iterations),
        salt=b"salt",
        salted_password=b"p" * 32,
    )


def deletion(name: str) -> ScramCredentialDeletion:
    return ScramCredentialDeletion(name=name, mechanism=SCRAM_SHA_256)


def test_each_user_is_answered_once_an_empty_name_before_any_other_check():
    request = AlterUserScramCredentialsRequest(
        deletions=(deletion("alice"), deletion(""), deletion("dave")),
        upsertions=(upsertion("alice"), upsertion("bob"), upsertion(""), upsertion("carol", iterations=1)),
    )
    records, results = security_control.alter_scram_credentials(MetadataImage(), request)
    assert {r.user: r.error_code for r in results} == {
        "": ErrorCode.unacceptable_credential,
        "alice": ErrorCode.duplicate_resource,
        "dave": ErrorCode.resource_not_found,
        "bob": ErrorCode.none,
        "carol": ErrorCode.unacceptable_credential,
    }
    assert [(type(r).__name__, r.name) for r in records] == [("UserScramCredentialRecord", "bob")]
