"""Kafka wire protocol: framing, API registry, error codes, record batches and KRaft metadata records."""
