"""Local clusters of the real daemons and what drives them, shared by ``epochkraft cluster``, the chaos
tool, the benchmarks, the peers' comparisons and the tests: the processes (``processes.py``), a cluster of
them (``cluster.py``, ``containers.py`` for Docker), the small Kafka client the tools use
(``kio_client.py``), and the controller quorum's operations (``quorum_ops.py``)."""
