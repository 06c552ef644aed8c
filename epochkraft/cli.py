"""The ``epochkraft`` command: one subcommand per tool, each owning its own argument parser."""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module with ``main(argv) -> int``, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "controller": ("epochkraft.server.controller_daemon", "run the controller daemon"),
    "broker": ("epochkraft.server.broker_daemon", "run a broker daemon"),
    "cluster": (
        "epochkraft.harness.cluster_cli",
        "start and drive a local cluster (up, status, kill, restart)",
    ),
    "chaos": ("epochkraft.chaos.cli", "run a workload with faults and check for lost records"),
    "analyze": ("epochkraft.analytics.cli", "analyse a metrics dir with PySpark"),
    "bench": ("epochkraft.bench.cli", "run the benchmarks"),
    "sim": ("epochkraft.sim.cli", "run the deterministic cluster simulation"),
}


def usage() -> str:
    lines = ["usage: epochkraft <command> [options]", "", "commands:"]
    lines += [f"  {name:<11} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run 'epochkraft <command> --help' for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        print(f"epochkraft: unknown command {command!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[command][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
