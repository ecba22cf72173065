"""Apicurio Registry on loopback, started from its Maven Central release, for the schema-registry tests.

Apicurio Registry serves the Confluent Schema Registry REST API under ``/apis/ccompat/v7`` (``ccompat``) beside its
own. Its release :data:`APICURIO_VERSION` is on Maven Central as a self-contained Quarkus application
(``io.apicurio:apicurio-registry-app``, classifier ``all``, a ``tar.gz`` of about 160 MB); it is downloaded once,
its SHA-1 checked against Maven Central's, and unpacked into ``CACHE/apicurio-registry-VERSION/`` (the cache of
:mod:`spark_kafka_backup.jars`), under a lock and through a temporary sibling, so that a killed download leaves
nothing that looks complete.

It needs Java :data:`JAVA_NEEDED` or newer (its classes are version 65). :func:`registry_java` finds one:
``$KBACKUP_REGISTRY_JAVA`` (a ``java`` or a JDK's home) when set, else ``$JAVA_HOME``, ``java`` on the ``PATH`` and
the JDKs under ``/usr/lib/jvm`` and ``/opt/java``, the first new enough; none is one line naming what it found.

An :class:`ApicurioRegistry` runs with in-memory storage (every start is an empty registry) on a free loopback port,
its management interface on another (by default it would listen on every interface, on port 9000), in its own
process group with a parent-death signal; ``start()`` waits until the API answers, ``stop()`` kills the group and
removes the directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from devkit.kafka_cluster import die_with_parent, free_port
from spark_kafka_backup.errors import ArtifactError, SparkKafkaBackupError
from spark_kafka_backup.jars import cache_root

APICURIO_VERSION = "3.3.3"
JAVA_NEEDED = 21
#: Maven Central, or a mirror of it (``KBACKUP_MAVEN_REPOSITORY``).
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
#: Where the Confluent-compatible API is served, under the registry's root.
CCOMPAT_PATH = "/apis/ccompat/v7"
_STAMP = ".complete"


class RegistryServerError(SparkKafkaBackupError):
    """A local schema registry could not be fetched, or started."""


def release_url(version: str = APICURIO_VERSION) -> str:
    base = os.environ.get("KBACKUP_MAVEN_REPOSITORY") or MAVEN_CENTRAL
    name = f"apicurio-registry-app-{version}-all.tar.gz"
    return f"{base.rstrip('/')}/io/apicurio/apicurio-registry-app/{version}/{name}"


def registry_home(version: str = APICURIO_VERSION, *, root: Path | None = None) -> Path:
    """The unpacked release (``quarkus-run.jar`` and its ``lib/``), fetched from Maven Central on first use."""
    root = root or cache_root()
    home = root / f"apicurio-registry-{version}"
    if (home / _STAMP).is_file():
        return home
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".apicurio-registry-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / _STAMP).is_file():
            return home
        url = release_url(version)
        print(f"spark-kafka-backup: fetching Apicurio Registry {version} (160 MB) from {url} into {home}", flush=True)
        staging = Path(tempfile.mkdtemp(prefix=f".apicurio-registry-{version}-", dir=root))
        try:
            archive = staging / "release.tar.gz"
            _download(url, archive)
            unpacked = staging / "release"
            with tarfile.open(archive) as tar:
                tar.extractall(unpacked, filter="data")
            if not (unpacked / "quarkus-run.jar").is_file():
                raise ArtifactError(f"{url}: the archive holds no quarkus-run.jar")
            (unpacked / _STAMP).write_text(url + "\n")
            if home.exists():
                shutil.rmtree(home)
            unpacked.rename(home)
            return home
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def _download(url: str, into: Path) -> None:
    """``url`` into the file ``into``, checked against the repository's ``.sha1``."""
    try:
        with urllib.request.urlopen(url + ".sha1", timeout=60) as answer:
            expected = answer.read().decode("ascii", "replace").split()[0].lower()
        digest = hashlib.sha1(usedforsecurity=False)
        with urllib.request.urlopen(url, timeout=60) as answer, open(into, "wb") as out:
            while chunk := answer.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, OSError, IndexError) as exc:
        raise ArtifactError(f"cannot download {url}: {exc}") from exc
    if digest.hexdigest() != expected:
        raise ArtifactError(f"{url}: SHA-1 {digest.hexdigest()}, but the repository gives {expected}")


_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


def java_feature_version(java: str) -> int | None:
    """The Java release of the ``java`` binary (8, 17, 21, ...), ``None`` when it does not run."""
    try:
        result = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = _VERSION.search(result.stderr + result.stdout)
    if result.returncode != 0 or found is None:
        return None
    major = int(found.group(1))
    return int(found.group(2) or 0) if major == 1 else major  # "1.8.0" is Java 8


def _java_candidates() -> Iterator[str]:
    configured = os.environ.get("KBACKUP_REGISTRY_JAVA")
    if configured:
        yield os.path.join(configured, "bin", "java") if os.path.isdir(configured) else configured
        return
    if os.environ.get("JAVA_HOME"):
        yield os.path.join(os.environ["JAVA_HOME"], "bin", "java")
    on_path = shutil.which("java")
    if on_path:
        yield on_path
    for parent in ("/usr/lib/jvm", "/opt/java", "/usr/local/lib/jvm"):
        with contextlib.suppress(OSError):
            for home in sorted(Path(parent).iterdir(), reverse=True):
                if (home / "bin" / "java").is_file():
                    yield str(home / "bin" / "java")


def registry_java(needed: int = JAVA_NEEDED) -> str:
    """A ``java`` of release ``needed`` or newer; :class:`RegistryServerError` in one line when there is none."""
    found = []
    for java in dict.fromkeys(_java_candidates()):
        version = java_feature_version(java)
        if version is not None and version >= needed:
            return java
        found.append(f"{java} ({'does not run' if version is None else f'Java {version}'})")
    raise RegistryServerError(
        f"Apicurio Registry {APICURIO_VERSION} needs Java {needed} or newer, found only "
        f"{', '.join(found) or 'no java'}: install one and point KBACKUP_REGISTRY_JAVA at it"
    )


@dataclass
class ApicurioRegistry:
    """One Apicurio Registry with in-memory storage on loopback; use as a context manager."""

    start_timeout: float = 180.0
    heap: str = "384m"
    port: int = 0
    directory: Path | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The Confluent-compatible API, as ``--schema-registry`` takes it."""
        return self.root + CCOMPAT_PATH

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> ApicurioRegistry:
        """Launch it and wait until it answers."""
        self.launch()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def launch(self) -> None:
        """Start the process without waiting for it (several registries start at once: launch each, then
        :meth:`wait_ready` each). From the thread that outlives it: the parent-death signal follows the thread."""
        home = registry_home()
        java = registry_java()
        self.directory = Path(tempfile.mkdtemp(prefix="kbackup-apicurio-"))
        try:
            self._launch(home, java)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=30)
            self.process = None
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def __enter__(self) -> ApicurioRegistry:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def log_tail(self, lines: int = 20) -> str:
        path = self.directory / "registry.log" if self.directory else None
        if path is None or not path.is_file():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _launch(self, home: Path, java: str) -> None:
        assert self.directory is not None
        self.port = self.port or free_port()
        env = {
            **os.environ,
            "QUARKUS_HTTP_HOST": "127.0.0.1",
            "QUARKUS_HTTP_PORT": str(self.port),
            "QUARKUS_MANAGEMENT_HOST": "127.0.0.1",
            "QUARKUS_MANAGEMENT_PORT": str(free_port()),
            "QUARKUS_HTTP_ACCESS_LOG_ENABLED": "false",
        }
        command = [java, f"-Xmx{self.heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-jar", "quarkus-run.jar"]
        with open(self.directory / "registry.log", "ab") as out:
            self.process = subprocess.Popen(
                command,
                cwd=home,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent,
            )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            if not self.running:
                raise RegistryServerError(f"Apicurio Registry exited during start-up:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise RegistryServerError(
                    f"Apicurio Registry did not answer within {self.start_timeout:.0f} s:\n{self.log_tail()}"
                )
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(self.url + "/subjects", timeout=5) as answer,
            ):
                if answer.status == 200:
                    return
            time.sleep(0.3)
