"""Kafka's rules for a topic's name (its common Topic class), shared by the controller and the brokers."""

from __future__ import annotations

MAX_TOPIC_NAME = 249


def valid_topic_name(name: str) -> str | None:
    """None if valid, else why not (Kafka's Topic.validate)."""
    if not name or name in (".", ".."):
        return "topic name is empty, '.' or '..'"
    if len(name) > MAX_TOPIC_NAME:
        return f"topic name longer than {MAX_TOPIC_NAME} characters"
    if not all(c.isascii() and (c.isalnum() or c in "._-") for c in name):
        return "topic name may only hold ASCII letters, digits, '.', '_' and '-'"
    return None
