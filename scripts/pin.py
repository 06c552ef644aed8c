"""Regenerates constraints.txt: pip resolves every extra of pyproject.toml and this writes one exact
version per package. Keeps the current pins where the ranges still allow them; --upgrade moves every
package to the newest version its range allows.

    python3 scripts/pin.py [--upgrade]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
EXTRAS = "test,notebook"


def header(text: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(line for line in lines if line.startswith("#"))


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--upgrade", action="store_true", help="ignore the current pins")
    args = parser.parse_args()
    current = CONSTRAINTS.read_text()
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        command += ["--report", str(report), "-e", f"{ROOT}[{EXTRAS}]"]
        if not args.upgrade:
            # Without the project's own line, so an edited range can still move a pin.
            kept = Path(tmp) / "kept.txt"
            kept.write_text(current)
            command += ["-c", str(kept)]
        subprocess.run(command, check=True)
        resolved = json.loads(report.read_text())["install"]
    pins = sorted(
        ((item["metadata"]["name"], item["metadata"]["version"]) for item in resolved),
        key=lambda pin: pin[0].lower(),
    )
    pins = [(name, version) for name, version in pins if name != "epochkraft"]
    CONSTRAINTS.write_text(header(current) + "".join(f"{name}=={version}\n" for name, version in pins))
    print(f"{CONSTRAINTS.relative_to(ROOT)}: {len(pins)} packages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
