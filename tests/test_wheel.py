"""The built wheel stands alone: installed outside the checkout, its CLI and job entry points run.

The wheel is built from the checkout and installed (without dependencies) into a fresh
virtual environment whose only other path is the test environment's site-packages, for
the dependencies (PySpark, confluent-kafka, ...). A ``.pth`` path is not a site directory,
so the checkout's editable install there is not seen: every ``spark-kafka-backup`` module comes from
the wheel. Commands run from a directory outside the checkout.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.writer import PartitionWriter

REPO = Path(__file__).resolve().parent.parent

#: Building the sdist, then the wheel from it (the native extension compiled), takes a minute of CI's two cores: a
#: release check, in the long tier.
pytestmark = pytest.mark.long


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding only the wheel; returns its ``bin`` directory."""
    work = tmp_path_factory.mktemp("wheel")
    dist = work / "dist"
    # As a release is built: the sdist first, then the wheel from the sdist (so the sdist must hold what it needs).
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(REPO)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
    # The README's build line says nothing of warnings: a user who sees setuptools' boxed "Package would be
    # ignored" about the C sources' directories cannot tell it is harmless.
    assert "Package would be ignored" not in built.stdout + built.stderr, (built.stdout + built.stderr)[-3000:]
    (sdist,) = dist.glob("spark_kafka_backup-*.tar.gz")  # the distribution's name, normalized
    # A wheel for this platform: it carries the native Kafka edge, compiled (a user of the wheel needs no compiler).
    (wheel,) = dist.glob("spark_kafka_backup-*.whl")
    with tarfile.open(sdist) as archive:
        top = sdist.name.removesuffix(".tar.gz")
        members = {member.name.removeprefix(f"{top}/") for member in archive.getmembers()}
    assert {
        "pyproject.toml",
        "README.md",
        "spark_kafka_backup/cli/__init__.py",
        "spark_kafka_backup/jobs/log4j2.properties",
        "spark_kafka_backup/kafka/_native/consume.c",
        "spark_kafka_backup/kafka/_native/rdkafka.h",
        "spark_kafka_backup/format/_native/records.c",
    } <= members
    names = zipfile.ZipFile(wheel).namelist()
    metadata = zipfile.ZipFile(wheel).read(f"{top}.dist-info/METADATA").decode()
    assert "Name: spark-kafka-backup" in metadata.splitlines(), metadata[:500]
    entry_points = zipfile.ZipFile(wheel).read(f"{top}.dist-info/entry_points.txt").decode()
    assert "spark-kafka-backup = spark_kafka_backup.cli:main" in entry_points, entry_points
    assert "spark_kafka_backup/jobs/backup.py" in names and "spark_kafka_backup/jobs/restore.py" in names
    assert (
        "spark_kafka_backup/jobs/log4j2.properties" in names
    )  # Spark's logging until a job sets its level (spark_submit)
    assert not [name for name in names if name.startswith(("tests/", "benchmarks/", "jobs/", "devkit/"))]
    # No test or demo server ships to the users' executors: the devkit stays in the repository.
    servers = {"kafka_cluster.py", "spark_cluster.py", "apicurio.py", "oidc.py", "tls.py", "demo.py", "s3_server.py"}
    assert not [name for name in names if "devkit" in name or name.rpartition("/")[2] in servers], names
    assert [name for name in names if name.startswith("spark_kafka_backup/kafka/_native_kafka.") and ".so" in name]
    assert "spark_kafka_backup/kafka/_native_kafka.pyi" in names  # the compiled module's types and named results
    assert [name for name in names if name.startswith("spark_kafka_backup/format/_native_records.") and ".so" in name]
    assert "spark_kafka_backup/format/_native_records.pyi" in names  # the records' compiled scanner
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # The dependencies, from the test environment (added after the venv's own site-packages).
    dependencies = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    Path(purelib, "dependencies.pth").write_text("".join(f"{path}\n" for path in dict.fromkeys(dependencies)))
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--quiet", str(wheel)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert install.returncode == 0, install.stderr[-3000:]
    return venv / "bin"


def _run(bin_dir: Path, cwd: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "SPARK_HOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        [str(bin_dir / command[0]), *command[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_installed_package_comes_from_the_wheel(installed: Path, tmp_path: Path) -> None:
    found = _run(
        installed,
        tmp_path,
        "python",
        "-c",
        "import spark_kafka_backup, spark_kafka_backup.cli; print(spark_kafka_backup.__file__)",
    )
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()).is_relative_to(installed.parent), found.stdout
    assert not Path(found.stdout.strip()).is_relative_to(REPO)
    # The wheel's compiled native edge loads beside the installed confluent-kafka.
    native = _run(installed, tmp_path, "python", "-c", "from spark_kafka_backup.kafka.columnar import native_edge; "
                  "m = native_edge(); print(m.__file__ if m else 'none')")  # fmt: skip
    assert native.returncode == 0, native.stderr
    assert Path(native.stdout.strip()).is_relative_to(installed.parent), native.stdout


def test_cli_and_job_help_run_outside_the_checkout(installed: Path, tmp_path: Path) -> None:
    top = _run(installed, tmp_path, "spark-kafka-backup", "--help")
    assert top.returncode == 0 and "usage: spark-kafka-backup" in top.stdout, top.stderr
    for job in ("backup", "restore"):
        helped = _run(installed, tmp_path, "spark-kafka-backup", job, "--help")
        assert helped.returncode == 0, helped.stderr
        assert f"usage: spark-kafka-backup {job}" in helped.stdout and "--bootstrap-server" in helped.stdout
        where = ["--target-dir", "t", "--topics", "orders"] if job == "backup" else ["--source-dir", str(tmp_path)]
        command = _run(
            installed, tmp_path, "spark-kafka-backup", job, "--print-command", "--bootstrap-server", "h:1", *where
        )
        assert command.returncode == 0, command.stderr
        job_file = installed.parent / "lib"
        assert str(job_file) in command.stdout and f"spark_kafka_backup/jobs/{job}.py" in command.stdout, command.stdout


def test_every_cli_command_reads_a_backup_outside_the_checkout(installed: Path, tmp_path: Path) -> None:
    root = tmp_path / "backup"
    with PartitionWriter(root / "orders", "orders", 0, max_segment_size=300, fsync=False) as writer:
        for offset in range(20):
            writer.append(Record(offset, 0, 1_700_000_000_000 + offset, b"k%d" % offset, b"v%d" % offset))
    runs = {
        "ls": ["ls", str(root)],
        "describe": ["describe", str(root)],
        "cat": ["cat", str(root), "--topic", "orders", "--partition", "0", "--from-offset", "5", "--to-offset", "6"],
        "catalog rebuild": ["catalog", "rebuild", str(root)],
        "verify": ["verify", str(root)],
        "offsets": ["offsets", str(root), "--topic", "orders"],
        "report": ["report", str(root), "--output", str(tmp_path / "report.html")],
        "index show": ["index", "show", str(root / "orders" / "index_partition_000")],
        "index rebuild": ["index", "rebuild", str(root / "orders")],
        "checkpoint list": ["checkpoint", "list", str(root)],
        "prune": ["prune", str(root), "--older-than", "3650d", "--dry-run"],
    }
    for what, arguments in runs.items():
        done = _run(installed, tmp_path, "spark-kafka-backup", *arguments)
        assert "Traceback" not in done.stderr, f"{what}: {done.stderr}"
        assert done.returncode == 0, f"{what}: {done.stdout}{done.stderr}"
    printed = _run(installed, tmp_path, "spark-kafka-backup", *runs["cat"]).stdout.splitlines()
    assert [json.loads(line)["offset"] for line in printed] == [5, 6]
    assert (tmp_path / "report.html").stat().st_size > 0
