"""Reference peers run beside epochkraft on loopback: Apache Kafka (its jars from Maven Central) and
franz-go's kfake (from the Go module proxy), pinned in ``peers/`` and cached outside the repository."""
