"""The broker's metadata cache: the last metadata image published (the same image type the controller
builds), and what publishes the next one.

The loader replays what it fetched (whole batches) into a ``MetadataDelta`` over the published image and
publishes the next image (``publish``, which hands it to the cache's publishers too) before the delta's
``Changes`` reach the replica manager, as Kafka's KRaftMetadataCache.setImage before
ReplicaManager.applyDelta: what a handler reads is always an image the controller wrote, whole.

The cache holds no queries of its own: a reader takes ``cache.image`` once per request or operation and
asks that image (``MetadataImage.partition``, ``endpoint``, ``topic_config``, ...), so a handler that
awaits between two reads answers from one image, as Kafka's KRaftMetadataCache reads ``_currentImage``
once per method.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from epochkraft.metadata.image import Changes, MetadataDelta, MetadataImage

__all__ = ["Changes", "MetadataCache"]


class MetadataCache:
    def __init__(self, node_id: int = -1) -> None:
        self.image = MetadataImage(node_id)
        self.next_offset = 0  # offset after the last record in the published image
        self.cluster_id: str | None = None
        # told of each image as it is published, before its changes reach the replica manager (Kafka's
        # metadata publishers: the authorizer's AclPublisher)
        self.publishers: list[Callable[[MetadataImage], None]] = []

    def publish(self, image: MetadataImage, next_offset: int) -> None:
        self.image = image
        self.next_offset = next_offset
        for publisher in self.publishers:
            publisher(image)

    # ---- applying records ----------------------------------------------------------------------------
    def load(self, records: Iterable[tuple[int, object]], changes: Changes) -> None:
        """(offset, record) pairs replayed over the published image into one delta, the next image
        published with ``changes`` filled. A record that fails leaves the published image as it was."""
        delta = MetadataDelta(self.image, changes)
        next_offset = self.next_offset
        for offset, record in records:
            delta.replay(record)
            next_offset = max(next_offset, offset + 1)
        self.publish(delta.apply(), next_offset)

    def apply(self, offset: int, record: object, changes: Changes) -> None:
        """One record as a batch of its own (tools and tests)."""
        self.load([(offset, record)], changes)
