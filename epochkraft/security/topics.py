"""Topics clients may not treat as their own (Kafka's Topic.isInternal and the metadata topic)."""

from __future__ import annotations

CLUSTER_METADATA_TOPIC = "__cluster_metadata"
# Topic.INTERNAL_TOPICS: clients cannot produce to them; deleting one takes a super user here.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
