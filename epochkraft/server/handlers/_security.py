"""What the ACL and SCRAM handlers share: the node's metadata image on either listener."""

from __future__ import annotations

from epochkraft.metadata.image import MetadataImage
from epochkraft.protocol.api import BROKER
from epochkraft.server.context import RequestContext


def image_of(ctx: RequestContext) -> MetadataImage:
    """The broker's metadata cache or the controller's image: both are built from the metadata log."""
    return ctx.broker.cache if ctx.listener == BROKER else ctx.controller_node.controller.image
