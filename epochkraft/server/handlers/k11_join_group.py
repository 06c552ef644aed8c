"""JoinGroup (key 11), versions 0-9, broker listener.

- The first join of a new member (v4+) gets MEMBER_ID_REQUIRED with its member id (KIP-394).
- A join to a KIP-848 consumer group with members makes the member a classic member of it (Kafka's
  classicGroupJoinToConsumerGroup): answered at once with its member epoch as the generation and no
  leader; its assignment comes from the coordinator's assignor in SyncGroup.
- Waits until every member has rejoined (or the rebalance timeout), then answers with the generation;
  the leader also gets every member's protocol metadata.
- NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS when this broker does not coordinate the group.
- A static member (v5+ group.instance.id) joins without MEMBER_ID_REQUIRED; one that comes back under a
  new member id to a Stable group with the same protocols takes the old id's place without a rebalance
  (KIP-345), once the group is written; a join or sync still waiting under the old id is answered
  FENCED_INSTANCE_ID.
- v0 has no rebalance timeout (the session timeout is used); v8+ a reason (KIP-800, not kept); v9 answers
  SkipAssignment true to a replaced static leader, which keeps the group's assignment (before v9 it is
  answered the old leader id, so it syncs as a follower).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kio.schema.join_group.v9.response import JoinGroupResponse, JoinGroupResponseMember
from kio.static.primitive import i32

from epochkraft.broker.consumer_group_classic import ClassicJoin
from epochkraft.broker.topics_image import CacheTopics
from epochkraft.protocol.api import BROKER, api
from epochkraft.protocol.errors import ErrorCode
from epochkraft.protocol.versions import downgrade_response
from epochkraft.server.context import RequestContext
from epochkraft.server.handlers._util import NO_THROTTLE, ms

if TYPE_CHECKING:
    from epochkraft.protocol import request_types as rt

LATEST = 9


@api(key=11, name="JoinGroup", versions=(0, LATEST), listeners=(BROKER,))
async def handle(request: rt.JoinGroup, ctx: RequestContext):
    groups = ctx.broker.groups
    error = groups.coordinator_error(request.group_id)
    result_error: ErrorCode
    protocol_name: str | None
    members: tuple[tuple[str, str | None, bytes], ...]
    skip_assignment = False
    if error != ErrorCode.none:
        result_error, member_id, generation, protocol_type, protocol_name, leader, members = (
            error,
            request.member_id,
            -1,
            None,
            None,
            "",
            (),
        )
    else:
        join = ClassicJoin(
            group_id=request.group_id,
            member_id=request.member_id,
            instance_id=getattr(request, "group_instance_id", None),
            protocol_type=request.protocol_type,
            protocols=tuple((p.name, p.metadata) for p in request.protocols),
            session_timeout_ms=ms(request.session_timeout),
            rebalance_timeout_ms=ms(getattr(request, "rebalance_timeout", 0)),
            client_id=ctx.header.client_id or "",
            client_host=ctx.group_client_host,
            require_known_member_id=ctx.api_version >= 4,
            skip_assignment_supported=ctx.api_version >= 9,
        )
        result = await groups.join(join, CacheTopics(ctx.broker.cache))
        result_error, member_id, generation = result.error, result.member_id, result.generation_id
        protocol_type, protocol_name, leader, members = (
            result.protocol_type,
            result.protocol_name,
            result.leader,
            result.members,
        )
        skip_assignment = result.skip_assignment
    response = JoinGroupResponse(
        throttle_time=NO_THROTTLE,
        error_code=result_error,
        generation_id=i32(generation),
        protocol_type=protocol_type,
        # Versions before 7 cannot carry a null protocol name.
        protocol_name=protocol_name if protocol_name is not None or ctx.api_version >= 7 else "",
        leader=leader,
        skip_assignment=skip_assignment,
        member_id=member_id,
        members=tuple(
            JoinGroupResponseMember(member_id=mid, group_instance_id=instance, metadata=meta)
            for mid, instance, meta in members
        ),
    )
    return downgrade_response(response, ctx.api_version)
