"""The metadata cache as a consumer group coordinator sees topics (``consumer_group.TopicsImage``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from epochkraft.broker.consumer_group import TopicMetadata
from epochkraft.broker.group_coordinator import OFFSETS_TOPIC
from epochkraft.broker.metadata_cache import MetadataCache
from epochkraft.metadata.image import MetadataImage

INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, "__transaction_state", "__share_group_state"})
# Leaves the internal topics out (the old rule), for the test that shows the rule is checked.
EXCLUDE_INTERNAL_FOR_TESTS = False


class CacheTopics:
    """Topics as the coordinator asks for them: of one image, or of the cache's image published last (a
    coordinator keeps this for as long as it runs), each call reading that image once."""

    def __init__(self, source: MetadataImage | MetadataCache) -> None:
        self.source = source

    def _image(self) -> MetadataImage:
        source = self.source
        return source.image if isinstance(source, MetadataCache) else source

    def by_name(self, name: str) -> TopicMetadata | None:
        info = self._image().topic(name)
        return None if info is None else TopicMetadata(info.topic_id, info.name, len(info.partitions))

    def by_id(self, topic_id: uuid.UUID) -> TopicMetadata | None:
        info = self._image().topics.get(topic_id)
        return None if info is None else TopicMetadata(info.topic_id, info.name, len(info.partitions))

    @property
    def version(self) -> int:
        return self._image().topics_version

    def names(self) -> Iterable[str]:
        """Every topic, internal ones too, as Kafka's GroupMetadataManager.refreshRegularExpressions
        matches a regex against every name in the image (a member asking for ``__consumer_offsets`` gets it)."""
        names = self._image().topic_ids
        if EXCLUDE_INTERNAL_FOR_TESTS:
            return (name for name in names if name not in INTERNAL_TOPICS)
        return iter(names)
