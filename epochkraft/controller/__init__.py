"""The controller: broker registrations and epochs, sessions, topics, ISR changes and elections.

Sans-IO core: ``Controller`` (controller.py) takes ``now_ms`` and kio requests, appends records to its
``MetadataLog`` and replays them into ``ClusterControl`` (brokers, epochs, sessions) and
``ReplicationControl`` (topics, partitions, ISRs); ``PartitionChangeBuilder`` computes every leader/ISR
change. The daemon (daemon.py) wires it to sockets, timers and the on-disk metadata log.
"""
