"""The admin HTTP port's command-line flags, shared by the broker and the controller daemons."""

from __future__ import annotations

import argparse


def add_admin_arguments(parser: argparse.ArgumentParser) -> None:
    """The admin port's flags, the same on a broker and a controller."""
    parser.add_argument(
        "--admin-port", type=int, help="HTTP admin port (/metrics, /healthz, /readyz, /v1/state)"
    )
    parser.add_argument(
        "--admin-host", default="127.0.0.1", help="address the admin port binds (default 127.0.0.1)"
    )
    parser.add_argument(
        "--admin-secure",
        action="store_true",
        help="the admin port serves HTTPS with ssl.keystore.location and answers only super users (super.users):"
        " by a client certificate from ssl.truststore.location or HTTP Basic auth with their SCRAM password;"
        " /healthz stays open",
    )
