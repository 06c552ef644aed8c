"""epochkraft: a Kafka-compatible mini-cluster implementing KRaft's broker-epoch and ISR safety rules."""

__version__ = "0.1.0"
