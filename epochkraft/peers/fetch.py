"""Where the peers come from: the pinned versions (``peers/kafka/pom.xml``, ``peers/flink/pom.xml``,
``peers/kfake/go.mod``), the cache they are fetched into (``~/.cache/epochkraft/peers``, or
``$EPOCHKRAFT_PEERS_CACHE``), and the fetching itself, by Maven and by ``go build``. Nothing of theirs is
kept in the repository."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

PEERS_DIR = Path(__file__).resolve().parents[2] / "peers"
KAFKA_POM = PEERS_DIR / "kafka" / "pom.xml"
KFAKE_DIR = PEERS_DIR / "kfake"
FLINK_POM = PEERS_DIR / "flink" / "pom.xml"


class PeerUnavailable(RuntimeError):
    """A peer cannot be fetched here (no Maven, Go or Java, or no network): tests skip with the reason."""


def cache_dir() -> Path:
    env = os.environ.get("EPOCHKRAFT_PEERS_CACHE")
    base = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base if env else base / "epochkraft" / "peers"


def kafka_version() -> str:
    match = re.search(r"<kafka\.version>([^<]+)</kafka\.version>", KAFKA_POM.read_text())
    if match is None:
        raise PeerUnavailable(f"no kafka.version in {KAFKA_POM}")
    return match.group(1)


def kafka_libs() -> Path:
    """The directory of Kafka's jars (server, tools, clients, streams and their dependencies), fetched once per
    pom: the marker is named by the pom's hash, so a dependency added to the pom is fetched into the same
    directory (jars are only ever added there, so trees with older poms keep finding theirs)."""
    return maven_libs(KAFKA_POM, f"kafka-{kafka_version()}", f"Kafka {kafka_version()}")


def flink_version() -> str:
    match = re.search(r"<flink\.version>([^<]+)</flink\.version>", FLINK_POM.read_text())
    if match is None:
        raise PeerUnavailable(f"no flink.version in {FLINK_POM}")
    return match.group(1)


def flink_libs() -> Path:
    """The directory of Flink's jars (a local MiniCluster, the DataStream API, Flink's Kafka connector and
    the kafka-clients it was built with), apart from Kafka's: the two would bring two kafka-clients."""
    return maven_libs(FLINK_POM, f"flink-{flink_version()}", f"Flink {flink_version()}")


def maven_libs(pom: Path, name: str, what: str) -> Path:
    """A pom's runtime jars copied by Maven into ``<cache>/<name>/libs``, once per version of the pom."""
    libs = cache_dir() / name / "libs"
    pom_digest = hashlib.sha256(pom.read_bytes()).hexdigest()[:12]
    done = libs / f".complete-{pom_digest}"
    if done.exists():
        return libs
    for tool in ("mvn", "java"):
        if shutil.which(tool) is None:
            raise PeerUnavailable(f"{tool} is not installed")
    libs.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={libs}"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if result.returncode != 0:
        raise PeerUnavailable(f"mvn could not fetch {what}: {result.stdout[-2000:]}")
    done.write_text(name + "\n")
    return libs


def kafka_classpath() -> str:
    return str(kafka_libs() / "*")


def java_command(
    main_class: str, args: list[str], *, heap_mb: int = 256, jvm: Sequence[str] = ()
) -> list[str]:
    """A JVM running one of Kafka's main classes (the shell scripts are not in the Maven artifacts)."""
    return [
        "java", f"-Xmx{heap_mb}m", f"-Xms{min(heap_mb, 128)}m", "-XX:+UseG1GC",
        "-Djava.awt.headless=true", "-Djava.net.preferIPv4Stack=true",
        *jvm, "-cp", kafka_classpath(), main_class, *args,
    ]  # fmt: skip


def kfake_binary() -> Path:
    """franz-go's kfake behind peers/kfake/main.go, built once per go.sum."""
    digest = hashlib.sha256((KFAKE_DIR / "go.sum").read_bytes() + (KFAKE_DIR / "main.go").read_bytes())
    binary = cache_dir() / f"kfake-{digest.hexdigest()[:12]}"
    if binary.exists():
        return binary
    if shutil.which("go") is None:
        raise PeerUnavailable("go is not installed")
    binary.parent.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["go", "build", "-o", str(binary), "."],
        cwd=KFAKE_DIR, capture_output=True, text=True, timeout=900,
        env={**os.environ, "GOFLAGS": "-mod=readonly"},
    )  # fmt: skip
    if result.returncode != 0:
        raise PeerUnavailable(f"go could not build kfake: {result.stderr[-2000:]}")
    return binary


def franz_go_version() -> str:
    """The franz-go release kfake is built with (``peers/kfake/go.mod``): its kgo tests run from the same."""
    match = re.search(r"^\s*github\.com/twmb/franz-go (v\S+)", (KFAKE_DIR / "go.mod").read_text(), re.M)
    if match is None:
        raise PeerUnavailable(f"no github.com/twmb/franz-go in {KFAKE_DIR / 'go.mod'}")
    return match.group(1)


def franz_go_source() -> Path:
    """A writable copy of the pinned franz-go module (from the Go module proxy), where ``go test`` runs."""
    version = franz_go_version()
    source = cache_dir() / f"franz-go-{version}"
    if (source / "go.mod").exists():
        return source
    if shutil.which("go") is None:
        raise PeerUnavailable("go is not installed")
    source.parent.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(  # outside any module, so the version asked for is the one fetched
        ["go", "mod", "download", "-json", f"github.com/twmb/franz-go@{version}"],
        cwd=source.parent,
        capture_output=True, text=True, timeout=900, env={**os.environ, "GO111MODULE": "on"},
    )  # fmt: skip
    if result.returncode != 0:
        raise PeerUnavailable(f"go could not fetch franz-go {version}: {result.stdout[-2000:]}")
    module_dir = Path(json.loads(result.stdout)["Dir"])
    partial = source.with_suffix(".part")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(module_dir, partial)
    for path in [partial, *partial.rglob("*")]:  # the module cache is read-only; go test writes nothing
        path.chmod(path.stat().st_mode | 0o200)  # there, but removing the copy later needs write access
    partial.rename(source)
    return source
