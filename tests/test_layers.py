"""The package's layering, read from the source: the daemons never import the tools that test and measure
them, the state machines do no I/O of their own (time and randomness come in as arguments), and the Raft
core knows nothing of the controller, the brokers or the network that carry it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "epochkraft"

# What tests, measures and breaks the cluster; `epochkraft.cli` dispatches to them and is not a daemon.
TOOLS = ("harness", "chaos", "bench", "peers", "analytics", "sim")
NOT_DAEMON_CODE = {"cli.py", "__main__.py"}

# The sans-IO cores: they decide; the daemons' async edges do the reading, writing, sleeping and clock reads.
STATE_MACHINES = (
    "raft/client.py",
    "raft/replication.py",
    "raft/quorum_state.py",
    "raft/voter_set.py",
    "raft/messages.py",
    "controller/controller.py",
    "controller/partition_change.py",
    "controller/replication_control.py",
    "controller/cluster_control.py",
    "controller/configuration_control.py",
    "controller/producer_id_control.py",
    "controller/security_control.py",
    "broker/partition.py",
    "broker/fetch_rules.py",
    "broker/group_coordinator.py",
    "broker/producer_state.py",
    "broker/producer_id_manager.py",
    "broker/replication_quota.py",
    "broker/consumer_group.py",
    "broker/current_assignment.py",
    "broker/assignors.py",
    "broker/transaction_coordinator.py",
    "broker/transaction_metadata.py",
    "broker/transaction_markers.py",
    "broker/client_quotas.py",
    "broker/quota_stats.py",
    "controller/feature_control.py",
    "controller/client_quota_control.py",
)
IO_MODULES = {"asyncio", "socket", "ssl", "selectors", "subprocess", "threading", "time", "uvloop"}

RAFT_CORE_MUST_NOT_REACH = ("epochkraft.controller", "epochkraft.broker", "epochkraft.net")


def imported_modules(source: str) -> list[str]:
    """Every module an import statement names, at any depth (function-level imports too)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names.extend([node.module, *(f"{node.module}.{alias.name}" for alias in node.names)])
    return names


def offending(source: str, forbidden: tuple[str, ...] | set[str]) -> list[str]:
    """The imports of ``source`` that are, or are inside, a forbidden module."""
    return sorted(
        {
            name
            for name in imported_modules(source)
            for bad in forbidden
            if name == bad or name.startswith(bad + ".")
        }
    )


def daemon_files() -> list[Path]:
    tools = {PACKAGE / tool for tool in TOOLS}
    return [
        path
        for path in sorted(PACKAGE.rglob("*.py"))
        if not any(tool in path.parents for tool in tools) and path.name not in NOT_DAEMON_CODE
    ]


def test_the_checks_see_an_offending_import_at_any_depth():
    source = (
        "import json\n\ndef f():\n    from epochkraft.harness.cluster import LocalCluster\n    import time\n"
    )
    assert offending(source, ("epochkraft.harness",)) == [
        "epochkraft.harness.cluster",
        "epochkraft.harness.cluster.LocalCluster",
    ]
    assert offending(source, IO_MODULES) == ["time"]
    assert offending("from epochkraft.chaosmonkey import x\n", ("epochkraft.chaos",)) == []


def test_the_daemons_do_not_import_the_tools():
    forbidden = tuple(f"epochkraft.{tool}" for tool in TOOLS)
    found = {
        str(path.relative_to(PACKAGE)): bad
        for path in daemon_files()
        if (bad := offending(path.read_text(), forbidden))
    }
    assert found == {}


def test_the_state_machines_do_no_io():
    found = {
        module: bad
        for module in STATE_MACHINES
        if (bad := offending((PACKAGE / module).read_text(), IO_MODULES))
    }
    assert found == {}


def test_the_raft_core_stands_alone():
    found = {
        str(path.relative_to(PACKAGE)): bad
        for path in sorted((PACKAGE / "raft").glob("*.py"))
        if (bad := offending(path.read_text(), RAFT_CORE_MUST_NOT_REACH))
    }
    assert found == {}


def subpackage_imports(files: list[Path]) -> dict[str, set[str]]:
    """Subpackage -> the other subpackages of epochkraft its modules import (type-checking imports too)."""
    graph: dict[str, set[str]] = {}
    for path in files:
        parts = path.relative_to(PACKAGE).parts
        if len(parts) < 2:
            continue  # a top-level module (cli, config, files) belongs to no layer
        for name in imported_modules(path.read_text()):
            target = name.split(".")
            inside = target[0] == "epochkraft" and len(target) >= 2 and (PACKAGE / target[1]).is_dir()
            if inside and target[1] != parts[0]:
                graph.setdefault(parts[0], set()).add(target[1])
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles among the nodes of ``graph``: each set of more than one node that reach one another."""
    found: list[list[str]] = []
    for node in sorted(graph):
        reach = _reachable(graph, node)
        group = sorted(other for other in reach if node in _reachable(graph, other))
        if node in reach and group not in found:
            found.append(group)
    return found


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    reach: set[str] = set()
    stack = [start]
    while stack:
        for nxt in graph.get(stack.pop(), ()):
            if nxt not in reach:
                reach.add(nxt)
                stack.append(nxt)
    return reach


def test_the_cycle_check_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_the_daemons_subpackages():
    """The layers, bottom up: protocol, security, raft, metadata, net (transport), metrics, the cores
    (controller, broker), server (the daemons and their handlers); a cycle would make them one."""
    assert cycles(subpackage_imports(daemon_files())) == []


HANDLERS = PACKAGE / "server" / "handlers"


def listener_reads(source: str) -> list[int]:
    """The lines of ``source`` that read a request's listener (``ctx.listener``): a handler that branches on
    it serves two listeners in one function."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and node.attr == "listener"
    )


def test_the_listener_check_sees_a_branch_on_the_listener():
    source = "async def handle(request, ctx):\n    if ctx.listener == BROKER:\n        return None\n"
    assert listener_reads(source) == [2]
    assert listener_reads("def f(ctx):\n    return ctx.listener_name\n") == []


def test_no_handler_branches_on_its_listener():
    """As Kafka's KafkaApis and ControllerApis, a key served on both listeners has a handler for each
    (``handle_on_broker``, ``handle_on_controller``); what they share takes what differs as arguments."""
    found = {
        path.name: lines
        for path in sorted(HANDLERS.glob("*.py"))
        if (lines := listener_reads(path.read_text()))
    }
    assert found == {}
