"""The packed environment: spark-kafka-backup and what its executors import, in one archive a bare cluster runs.

Spark users' executors get Python packages from an image or from an archive the job ships, never from the driver's
site-packages. ``spark-kafka-backup pack`` writes that archive from this installation (the same files, the same
versions as the driver's, no index needed), and ``spark-kafka-backup backup|restore --archive FILE`` ships it (see
:func:`spark_kafka_backup.spark_submit.with_packed_environment`). Its layout, unpacked by Spark as ``kbackup-env/``
in each executor's working directory::

    kbackup-env/
      site-packages/      spark_kafka_backup (with its compiled edges unless packed --without-native) and every
                          distribution it needs at run time but PySpark and py4j (the cluster's Spark carries them:
                          they must match the Spark that runs the executors) and pandas (no job's executor imports
                          it: spark_kafka_backup/arrow_runtime.py); their tests and C headers are left out
      manifest.json       what was packed: spark-kafka-backup's version, the Python version and platform the
                          compiled files are for, whether the native edges are carried, each distribution's version

The archive is written beside its final name and renamed into place: a crash leaves the previous archive or none,
never half of one.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import os
import re
import sys
import sysconfig
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from spark_kafka_backup.errors import SparkKafkaBackupError
from spark_kafka_backup.packed import ENV_NAME

#: The packages' directory on each executor, relative to its working directory (where Spark unpacks archives).
EXECUTOR_PATH = f"./{ENV_NAME}/site-packages"
MANIFEST = "manifest.json"
#: Distributions the archive never carries: PySpark and py4j come with the cluster's Spark; pandas is imported by no
#: job's executor. What only they require is left out with them.
LEFT_OUT = frozenset({"pyspark", "py4j", "pandas"})
#: The compiled edges of spark-kafka-backup (module name: what it is, for the log).
NATIVE_MODULES = {
    "spark_kafka_backup.kafka._native_kafka": "native Kafka edge",
    "spark_kafka_backup.format._native_records": "compiled records scanner",
}
#: Parts of installed distributions no executor imports.
_UNUSED_PARTS = re.compile(r"(^|/)(__pycache__|tests?|include)(/|$)|\.(pyc|pxd|pyx|h|hpp|c|cc|cpp)$")


class PackError(SparkKafkaBackupError):
    """The packed environment cannot be made, or an archive given is not one."""


@dataclass(frozen=True)
class Manifest:
    """What a packed environment holds (its ``manifest.json``)."""

    version: str
    python: str
    platform: str
    native: tuple[str, ...]
    distributions: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        edges = " and ".join(NATIVE_MODULES[name] for name in self.native) or (
            "no compiled edge: confluent-kafka's client and numpy (the reference path)"
        )
        return f"spark-kafka-backup {self.version}, Python {self.python}, {self.platform}, {edges}"

    def to_json(self) -> str:
        return json.dumps(
            {
                "spark_kafka_backup": self.version,
                "python": self.python,
                "platform": self.platform,
                "native": list(self.native),
                "distributions": self.distributions,
            },
            indent=2,
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str, where: str) -> Manifest:
        try:
            data = json.loads(text)
            return cls(
                version=str(data["spark_kafka_backup"]),
                python=str(data["python"]),
                platform=str(data["platform"]),
                native=tuple(str(name) for name in data["native"]),
                distributions={str(k): str(v) for k, v in data["distributions"].items()},
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise PackError(f"{where}: not a manifest of spark-kafka-backup's packed environment ({exc})") from exc


#: A requirement's distribution name (PEP 508).
_REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")


def _installed(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_distributions(root: str = "spark-kafka-backup") -> list[importlib.metadata.Distribution]:
    """``root`` and every distribution it requires at run time (no extras), but :data:`LEFT_OUT` and what only they
    need; in the order met."""
    found: dict[str, importlib.metadata.Distribution] = {}

    def walk(name: str) -> None:
        key = _key(name)
        if key in found or key in LEFT_OUT:
            return
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError as exc:
            raise PackError(f"{name}, which {root} needs, is not installed in {sys.prefix}") from exc
        found[key] = distribution
        for text in distribution.requires or []:
            requirement, _, marker = text.partition(";")
            if re.search(r"\bextra\b", marker):
                continue  # an extra's: never asked for by spark-kafka-backup's run time
            found_name = _REQUIREMENT_NAME.match(requirement.strip())
            if found_name is None:
                continue
            if marker.strip() and not _installed(found_name[0]):
                continue  # the installer judged its marker false here (another platform's, Python's)
            walk(found_name[0])

    walk(root)
    return list(found.values())


def _distribution_files(distribution: importlib.metadata.Distribution) -> Iterator[tuple[str, Path]]:
    """(path in site-packages, file) of an installed distribution, from its RECORD; what lies outside its
    site-packages (scripts, data) and :data:`_UNUSED_PARTS` left out."""
    base = Path(str(distribution.locate_file(""))).resolve()
    for entry in distribution.files or []:
        relative = PurePosixPath(str(entry))
        if ".." in relative.parts or _UNUSED_PARTS.search(str(relative)):
            continue
        path = base / relative
        if path.is_file():
            yield str(relative), path


def _package_files(package: Path) -> Iterator[tuple[str, Path]]:
    """spark_kafka_backup's own files as installed (a wheel's or an editable checkout's): sources, the compiled
    edges, typing stubs, the jobs' files; not bytecode, not the C sources."""
    for path in sorted(package.rglob("*")):
        relative = path.relative_to(package.parent).as_posix()
        if path.is_file() and not _UNUSED_PARTS.search(relative) and "/_native/" not in relative:
            yield relative, path


def _native_files(files: Iterable[str]) -> tuple[str, ...]:
    """The compiled edges among ``files`` (paths in site-packages)."""
    carried = []
    for module in NATIVE_MODULES:
        prefix = module.replace(".", "/") + "."
        if any(name.startswith(prefix) and name.endswith((".so", ".pyd")) for name in files):
            carried.append(module)
    return tuple(carried)


def _add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    info.mtime = int(time.time())
    archive.addfile(info, io.BytesIO(data))


def pack(
    output: Path,
    *,
    native: bool = True,
    announce: Callable[[str], None] = lambda line: None,
) -> Manifest:
    """Write the packed environment of this installation to ``output`` (a ``.tar.gz``); ``native=False`` leaves out
    the compiled edges (the executors then use confluent-kafka's client and numpy)."""
    import spark_kafka_backup

    if not output.name.endswith((".tar.gz", ".tgz")):
        raise PackError(f"{output}: the packed environment is a .tar.gz (Spark unpacks it by its name)")
    if not output.parent.is_dir():
        raise PackError(f"{output.parent}: no such directory for the packed environment")
    package = Path(spark_kafka_backup.__file__).resolve().parent
    distributions = runtime_distributions()
    files: dict[str, Path] = {}
    for name, path in _package_files(package):
        files[name] = path
    for distribution in distributions[1:]:
        for name, path in _distribution_files(distribution):
            files.setdefault(name, path)
    if not native:
        files = {name: path for name, path in files.items() if not _native_files([name])}
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    manifest = Manifest(
        version=spark_kafka_backup.__version__,
        python=python,
        platform=sysconfig.get_platform(),
        native=_native_files(files),
        distributions={distribution.metadata["Name"]: distribution.version for distribution in distributions},
    )
    announce(
        f"packing {len(files):,} files of {len(distributions)} distributions into {output} ({manifest.describe()})"
    )
    making = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        # Level 1: the packages are mostly compiled code, which compresses little more at higher levels.
        # dereference: an install whose files are links (uv's symlink mode) ships the files, not links to them
        with tarfile.open(making, "w:gz", compresslevel=1, dereference=True) as archive:
            _add(archive, MANIFEST, manifest.to_json().encode() + b"\n")
            for name, path in sorted(files.items()):
                archive.add(path, arcname=f"site-packages/{name}", recursive=False, filter=_normalized)
        with open(making, "rb") as written:
            os.fsync(written.fileno())
        os.replace(making, output)
    except BaseException:
        making.unlink(missing_ok=True)
        raise
    return manifest


def _normalized(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """A member owned by nobody in particular, readable by all (an executor's user is not the packer's)."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o755 if info.mode & 0o111 else 0o644
    return info


def read_manifest(archive: Path) -> Manifest:
    """The manifest of a packed environment, from its archive (one clear error when it is not one)."""
    try:
        with tarfile.open(archive, "r:gz") as opened:
            member = opened.extractfile(MANIFEST)
            if member is None:
                raise KeyError(MANIFEST)
            text = member.read().decode()
    except FileNotFoundError as exc:
        raise PackError(f"{archive}: no such packed environment (make one with: spark-kafka-backup pack)") from exc
    except (KeyError, tarfile.TarError, OSError, EOFError, UnicodeDecodeError) as exc:
        raise PackError(
            f"{archive}: not a packed environment of spark-kafka-backup (no manifest.json in a .tar.gz: {exc})"
        ) from exc
    return Manifest.from_json(text, f"{archive}: {MANIFEST}")
