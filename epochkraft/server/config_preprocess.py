"""The broker's own checks of AlterConfigs and IncrementalAlterConfigs before it forwards them to the
controller, in Kafka's ConfigAdminManager.preprocess order, each INVALID_REQUEST answered by the broker:
every copy of a resource named twice ("Each resource must appear at most once."), a resource naming a config
twice ("Error due to duplicate config keys"), a resource naming a config with a null value other than an
incremental DELETE, whose value is not read ("Null value not supported for : a, b"). The other resources go
on to the controller and the answers are put back in the request's order
(ConfigAdminManager.reassembleIncrementalResponse and reassembleLegacyResponse). The controller itself
takes a null value as a deletion (its ConfigurationControlManager), so only a request sent to a broker is
refused.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence

from kio.schema.alter_configs.v2 import request as legacy_req
from kio.schema.alter_configs.v2 import response as legacy_resp
from kio.schema.incremental_alter_configs.v1 import request as incremental_req
from kio.schema.incremental_alter_configs.v1 import response as incremental_resp

from epochkraft.controller.configuration_control import OpType
from epochkraft.protocol.errors import ErrorCode
from epochkraft.server.handlers._util import NO_THROTTLE

AlterRequest = incremental_req.IncrementalAlterConfigsRequest | legacy_req.AlterConfigsRequest
AlterResponse = incremental_resp.IncrementalAlterConfigsResponse | legacy_resp.AlterConfigsResponse
Resource = incremental_req.AlterConfigsResource | legacy_req.AlterConfigsResource
Refusals = dict[int, str]  # index of a resource in the request -> the INVALID_REQUEST message


def resources_of(request: AlterRequest) -> Sequence[Resource]:
    return request.resources


def null_value_refusal(
    configs: Iterable[legacy_req.AlterableConfig | incremental_req.AlterableConfig],
) -> str | None:
    """Kafka's message for the configs of one resource given a null value, or None."""
    nulls = [
        c.name
        for c in configs
        if c.value is None
        and not (isinstance(c, incremental_req.AlterableConfig) and c.config_operation == OpType.DELETE)
    ]
    return f"Null value not supported for : {', '.join(nulls)}" if nulls else None


def preprocess(request: AlterRequest) -> tuple[Refusals, AlterRequest | None]:
    """(the resources the broker answers itself, the request of the rest to forward, or None if none), in
    ConfigAdminManager.preprocess's order: every copy of a resource named twice, then a resource naming a
    config twice, then one with a null value."""
    refusals: Refusals = {}
    keys = Counter((r.resource_type, r.resource_name) for r in resources_of(request))
    for index, resource in enumerate(resources_of(request)):
        names = [c.name for c in resource.configs]
        if keys[(resource.resource_type, resource.resource_name)] > 1:
            refusals[index] = "Each resource must appear at most once."
        elif len(set(names)) != len(names):
            refusals[index] = "Error due to duplicate config keys"
        elif (message := null_value_refusal(resource.configs)) is not None:
            refusals[index] = message
    if len(refusals) == len(request.resources):
        return refusals, None
    remaining = tuple(r for i, r in enumerate(request.resources) if i not in refusals)
    return refusals, dataclasses.replace(request, resources=remaining)  # type: ignore[arg-type]


async def through_controller(
    request: AlterRequest, forward: Callable[[AlterRequest], Awaitable[AlterResponse]]
) -> AlterResponse:
    """A broker's answer to ``request``: its own refusals, the rest ``forward``ed to the controller (if
    any is left), put back in request order."""
    refusals, remaining = preprocess(request)
    forwarded = None if remaining is None else await forward(remaining)
    return reassemble(request, refusals, forwarded)


def reassemble(request: AlterRequest, refusals: Refusals, forwarded: AlterResponse | None) -> AlterResponse:
    """The answer to ``request``: the broker's refusals and the controller's answers in request order."""
    module = (
        incremental_resp
        if isinstance(request, incremental_req.IncrementalAlterConfigsRequest)
        else legacy_resp
    )
    from_controller = iter(forwarded.responses if forwarded is not None else ())
    answers = []
    for index, resource in enumerate(resources_of(request)):
        if index in refusals:
            answers.append(
                module.AlterConfigsResourceResponse(
                    error_code=ErrorCode.invalid_request,
                    error_message=refusals[index],
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                )
            )
        else:
            answers.append(next(from_controller))
    throttle = forwarded.throttle_time if forwarded is not None else NO_THROTTLE
    if module is incremental_resp:
        return incremental_resp.IncrementalAlterConfigsResponse(
            throttle_time=throttle, responses=tuple(answers)
        )
    return legacy_resp.AlterConfigsResponse(throttle_time=throttle, responses=tuple(answers))
