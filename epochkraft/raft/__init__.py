"""A sans-IO Raft core with KafkaRaftClient's semantics (KIP-595, pre-vote of KIP-996)."""
