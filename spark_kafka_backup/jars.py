"""Java artifacts from Maven Central, resolved once into a local cache.

Resolution uses the Ivy that PySpark already carries (``pyspark/jars/ivy-*.jar``,
the resolver behind ``spark-submit --packages``), so a machine with Java and
PySpark needs nothing else; ``mvn dependency:copy-dependencies`` is the
fallback when that jar is missing or Ivy fails.

A resolved set lands in ``CACHE/NAME/`` (the jars plus a ``.complete`` stamp
naming the coordinates). It is retrieved into a temporary sibling and renamed
into place, under a lock file, so two processes asking at once resolve once
and a killed resolution leaves nothing that looks complete.

``CACHE`` is ``$KBACKUP_CACHE`` or ``~/.cache/spark-kafka-backup``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from spark_kafka_backup.errors import ArtifactError

_STAMP = ".complete"


@dataclass(frozen=True)
class Artifact:
    """A Maven coordinate ``group:name:version``."""

    group: str
    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.group}:{self.name}:{self.version}"


def cache_root() -> Path:
    configured = os.environ.get("KBACKUP_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "spark-kafka-backup"


def resolved_dir(name: str, artifacts: Sequence[Artifact], *, root: Path | None = None) -> Path | None:
    """``CACHE/NAME`` if it holds exactly these artifacts already, else None."""
    directory = (root or cache_root()) / name
    stamp = directory / _STAMP
    if stamp.is_file() and stamp.read_text() == _stamp_text(artifacts):
        return directory
    return None


def resolve(name: str, artifacts: Sequence[Artifact], *, root: Path | None = None, quiet: bool = False) -> Path:
    """The directory of ``artifacts`` and their runtime dependencies, fetched on first use.

    Raises :class:`ArtifactError` (with the resolver's last lines) when neither
    Ivy nor Maven can resolve them.
    """
    root = root or cache_root()
    done = resolved_dir(name, artifacts, root=root)
    if done is not None:
        return done
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = resolved_dir(name, artifacts, root=root)
        if done is not None:
            return done
        if not quiet:
            print(
                f"spark-kafka-backup: fetching {', '.join(map(str, artifacts))} from Maven Central into {root / name}",
                flush=True,
            )
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
        try:
            # Ivy takes no lock on its cache: each name its own, so that two first jobs (or a test run fetching
            # its sets at once) never write one file together.
            _fetch(artifacts, staging / "lib", root / ".ivy-cache" / name)
            jars = staging / "lib"
            (jars / _STAMP).write_text(_stamp_text(artifacts))
            final = root / name
            if final.exists():
                shutil.rmtree(final)
            jars.rename(final)
            return final
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def classpath(directory: Path) -> str:
    """A Java class path of every jar in ``directory``."""
    return os.pathsep.join(str(jar) for jar in sorted(directory.glob("*.jar")))


def _stamp_text(artifacts: Sequence[Artifact]) -> str:
    return "".join(f"{artifact}\n" for artifact in artifacts)


def _ivy_jar() -> Path | None:
    try:
        import pyspark
    except ImportError:
        return None
    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("ivy-*.jar"))
    return jars[-1] if jars else None


def _fetch(artifacts: Sequence[Artifact], into: Path, ivy_cache: Path) -> None:
    into.mkdir(parents=True)
    failures = []
    ivy = _ivy_jar()
    if ivy is not None:
        error = _fetch_with_ivy(ivy, artifacts, into, ivy_cache)
        if error is None:
            return
        failures.append(f"ivy: {error}")
        for leftover in into.iterdir():
            leftover.unlink()
    else:
        failures.append("ivy: no ivy jar in the PySpark installation")
    if shutil.which("mvn"):
        error = _fetch_with_maven(artifacts, into)
        if error is None:
            return
        failures.append(f"maven: {error}")
    else:
        failures.append("maven: mvn is not on PATH")
    raise ArtifactError(f"cannot resolve {', '.join(map(str, artifacts))}: " + "; ".join(failures))


def _tail(output: str, lines: int = 5) -> str:
    return " | ".join(line.strip() for line in output.strip().splitlines()[-lines:])


def _run_resolver(command: list[str], into: Path) -> str | None:
    """Run a resolver; None when it put jars into ``into``, else what went wrong."""
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if result.returncode != 0 or not any(into.glob("*.jar")):
        return _tail(result.stdout + result.stderr) or f"exit {result.returncode}"
    return None


def _fetch_with_ivy(ivy: Path, artifacts: Sequence[Artifact], into: Path, ivy_cache: Path) -> str | None:
    dependencies = "".join(
        f'    <dependency org="{a.group}" name="{a.name}" rev="{a.version}" conf="default->default"/>\n'
        for a in artifacts
    )
    module = (
        '<ivy-module version="2.0">\n'
        '  <info organisation="spark-kafka-backup" module="kbackup-fetch"/>\n'
        '  <configurations><conf name="default"/></configurations>\n'
        f"  <dependencies>\n{dependencies}  </dependencies>\n"
        "</ivy-module>\n"
    )
    with tempfile.TemporaryDirectory() as scratch:
        ivy_file = Path(scratch) / "ivy.xml"
        ivy_file.write_text(module)
        command = [
            "java",
            "-jar",
            str(ivy),
            "-ivy",
            str(ivy_file),
            "-confs",
            "default",
            "-cache",
            str(ivy_cache),
            "-retrieve",
            str(into / "[artifact]-[revision](-[classifier]).[ext]"),
            "-types",
            "jar",
            "bundle",
        ]
        return _run_resolver(command, into)


def _fetch_with_maven(artifacts: Sequence[Artifact], into: Path) -> str | None:
    dependencies = "".join(
        f"<dependency><groupId>{a.group}</groupId><artifactId>{a.name}</artifactId>"
        f"<version>{a.version}</version></dependency>"
        for a in artifacts
    )
    pom = (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>spark-kafka-backup</groupId><artifactId>kbackup-fetch</artifactId><version>0</version>"
        f"<dependencies>{dependencies}</dependencies></project>"
    )
    with tempfile.TemporaryDirectory() as scratch:
        (Path(scratch) / "pom.xml").write_text(pom)
        command = [
            "mvn",
            "-q",
            "-B",
            "-f",
            str(Path(scratch) / "pom.xml"),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={into}",
        ]
        return _run_resolver(command, into)
