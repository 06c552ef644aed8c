"""protocol/request_types.py is generated from the handlers' registrations; it must not go stale."""

from epochkraft.protocol import request_types
from epochkraft.protocol.api import BROKER, CONTROLLER
from epochkraft.protocol.framing import request_class
from epochkraft.server import gen_request_types
from epochkraft.server.handlers import served


def test_request_types_match_the_registry() -> None:
    assert gen_request_types.TARGET.read_text() == gen_request_types.render(), (
        f"protocol/request_types.py is stale: run {gen_request_types.COMMAND}"
    )


def test_each_alias_holds_exactly_the_registered_versions() -> None:
    for listener in (BROKER, CONTROLLER):
        for key, spec in served(listener).items():
            # an API served at other versions on each listener has an alias per listener (Fetch)
            per_listener = f"{spec.name}On{listener.capitalize()}"
            alias = getattr(request_types, per_listener, None) or getattr(request_types, spec.name)
            classes = set(getattr(alias, "__args__", (alias,)))
            expected = {request_class(key, v) for v in range(spec.min_version, spec.max_version + 1)}
            assert classes == expected, spec.name


def test_the_handlers_version_checks_cover_every_registered_version() -> None:
    """A check "is the request of a version that has field F" names the classes of those versions: a
    version registered later must join it, or its requests would be read as an older version's."""
    from epochkraft.protocol.kio_extra import ApiVersionsRequestV5
    from epochkraft.server.handlers import k01_fetch, k01_fetch_metadata_log, k03_metadata

    newest = {key: spec.max_version for key, spec in served(BROKER).items()}
    assert set(k03_metadata.WITH_AUTHORIZED_OPERATIONS) == {
        request_class(3, v) for v in range(8, newest[3] + 1)
    }
    by_id = {request_class(3, v).__module__ for v in range(10, newest[3] + 1)}
    assert {t.__module__ for t in k03_metadata.TOPICS_BY_ID} == by_id
    fetches = {v: request_class(1, v) for v in range(4, newest[1] + 1)}
    assert set(k01_fetch.WITH_SESSIONS) == {fetches[v] for v in range(7, newest[1] + 1)}
    assert set(k01_fetch.BY_TOPIC_ID) == {fetches[v] for v in range(13, newest[1] + 1)}
    assert set(k01_fetch.WITH_REPLICA_STATE) == {fetches[v] for v in range(15, newest[1] + 1)}
    assert set(k01_fetch.FetchBeforeV12.__args__) == {fetches[v] for v in range(4, 12)}
    newest_on_controller = served(CONTROLLER)[1].max_version
    voter_fetches = {request_class(1, v) for v in range(15, newest_on_controller + 1)}
    assert set(k01_fetch_metadata_log.VoterFetch.__args__) == voter_fetches
    # DescribeCluster's endpoint type (v1) and ApiVersions' KIP-1242 fields (v5) are read from the newest only
    assert newest[60] == 1
    assert request_class(18, newest[18]) is ApiVersionsRequestV5
