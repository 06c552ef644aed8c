"""Regenerates constraints.txt: pip resolves every extra of pyproject.toml and this writes one exact
version per package. Keeps the current pins where the ranges still allow them; --upgrade moves every
package to the newest version its range allows. Versions that need a newer Python than Debian bookworm's
3.11.2 (the images' Python), and yanked ones where pip reports them, are passed over for the newest
wheel 3.11.2 can use.

    python3 scripts/pin.py [--upgrade]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    from packaging.specifiers import SpecifierSet
except ImportError:  # pip always carries a copy
    from pip._vendor.packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
EXTRAS = "test,notebook"
BUILD_REQUIRES = ["setuptools>=68"]  # [build-system] requires in pyproject.toml
FLOOR_PYTHON = "3.11.2"


def header(text: str) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(line for line in lines if line.startswith("#"))


def resolve(constraints: list[str], tmp: Path) -> list[dict[str, str]]:
    report = tmp / "report.json"
    # setuptools too: the images build the package without build isolation.
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    command += ["--report", str(report), "-e", f"{ROOT}[{EXTRAS}]", *BUILD_REQUIRES]
    if constraints:
        kept = tmp / "constraints.txt"
        kept.write_text("\n".join(constraints) + "\n")
        command += ["-c", str(kept)]
    subprocess.run(command, check=True)
    return [
        item["metadata"] | {"yanked": item.get("is_yanked", False)}
        for item in json.loads(report.read_text())["install"]
    ]


def newest_for_floor(name: str, tmp: Path) -> str:
    """The newest version of ``name`` with a wheel for FLOOR_PYTHON (pip downloads that one wheel)."""
    target = tmp / f"floor-{name}"
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--only-binary=:all:"]
    command += ["--python-version", FLOOR_PYTHON, "-d", str(target), name]
    subprocess.run(command, check=True)
    wheel = next(target.glob("*.whl")).name
    return wheel.split("-")[1]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--upgrade", action="store_true", help="ignore the current pins")
    args = parser.parse_args()
    current = CONSTRAINTS.read_text()
    pinned = [] if args.upgrade else [line for line in current.splitlines() if line and line[0] != "#"]
    floor: list[str] = []  # name==version for packages whose resolved version needs a newer Python
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(3):
            resolved = resolve(pinned + floor, Path(tmp))
            too_new = [
                m["name"]
                for m in resolved
                if m["yanked"]
                or (m.get("requires_python") and FLOOR_PYTHON not in SpecifierSet(m["requires_python"]))
            ]
            if not too_new:
                break
            names = {name.lower() for name in too_new}
            pinned = [p for p in pinned if p.split("==")[0].lower() not in names]
            floor += [f"{name}=={newest_for_floor(name, Path(tmp))}" for name in too_new]
            print(f"newer than Python {FLOOR_PYTHON} allows, taking: {', '.join(floor)}")
        else:
            raise SystemExit(f"no resolution for Python {FLOOR_PYTHON}")
    pins = sorted(((m["name"], m["version"]) for m in resolved), key=lambda pin: pin[0].lower())
    body = "".join(f"{name}=={version}\n" for name, version in pins if name != "epochkraft")
    CONSTRAINTS.write_text(header(current) + body)
    print(f"{CONSTRAINTS.relative_to(ROOT)}: {len(pins) - 1} packages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
