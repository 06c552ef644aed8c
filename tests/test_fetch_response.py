"""The Fetch response encoder names each topic as the version does: by id from v13, by name before."""

import uuid

import pytest

from epochkraft.protocol.fetch_response import encode_response

TOPIC_ID = uuid.UUID("7b4a8c1e-0d2f-4e6a-9b3c-5d7e9f1a2b3c")


def encoded(version: int, topic: uuid.UUID | str | None) -> bytes:
    return b"".join(bytes(piece) for piece in encode_response(version, [(topic, [])]))


def test_a_topic_is_named_by_id_from_v13_and_the_zero_id_echoed():
    assert TOPIC_ID.bytes in encoded(13, TOPIC_ID)
    assert bytes(16) in encoded(13, None)


def test_a_topic_is_named_by_name_before_v13():
    assert b"foo" in encoded(12, "foo")


@pytest.mark.parametrize(
    ("version", "topic"), [(13, "foo"), (12, TOPIC_ID)], ids=["name at v13", "id at v12"]
)
def test_a_topic_named_as_the_version_does_not_is_refused(version, topic):
    with pytest.raises(TypeError, match="in a version that names topics by"):
        encoded(version, topic)
