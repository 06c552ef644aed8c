"""The daemons and what serves their requests, as Kafka's ``kafka.server``: the broker and controller
processes (``broker_daemon``, ``controller_daemon``), the socket server that reads requests and writes
answers, and the handlers (one module per API) that decode, call the cores and encode. The cores they
wire together (``broker``, ``controller``, ``raft``, ``metadata``) and the transport (``net``) never
import this package."""
