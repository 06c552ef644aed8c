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
    assert set(request_types.FetchOnBroker.__args__) == {request_class(1, v) for v in range(4, 19)}
    assert set(request_types.FetchOnController.__args__) == {request_class(1, v) for v in range(12, 18)}
    for listener in (BROKER, CONTROLLER):
        for key, spec in served(listener).items():
            if key == 1:
                continue
            alias = getattr(request_types, spec.name)
            classes = set(getattr(alias, "__args__", (alias,)))
            expected = {request_class(key, v) for v in range(spec.min_version, spec.max_version + 1)}
            assert classes == expected, spec.name
