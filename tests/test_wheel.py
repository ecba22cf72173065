"""The built wheel stands alone: installed outside the checkout, its CLI and job entry points run.

The wheel is built from the checkout and installed (without dependencies) into a fresh
virtual environment whose only other path is the test environment's site-packages, for
the dependencies (PySpark, confluent-kafka, ...). A ``.pth`` path is not a site directory,
so the checkout's editable install there is not seen: every ``kbackup`` module comes from
the wheel. Commands run from a directory outside the checkout.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from kbackup.format.record import Record
from kbackup.partition.writer import PartitionWriter

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding only the wheel; returns its ``bin`` directory."""
    work = tmp_path_factory.mktemp("wheel")
    dist = work / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(REPO)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("kbackup-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "kbackup/jobs/backup.py" in names and "kbackup/jobs/restore.py" in names
    assert "kbackup/jobs/log4j2.properties" in names  # Spark's logging until a job sets its level (spark_submit)
    assert not [name for name in names if name.startswith(("tests/", "benchmarks/", "jobs/"))]
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
    found = _run(installed, tmp_path, "python", "-c", "import kbackup, kbackup.cli; print(kbackup.__file__)")
    assert found.returncode == 0, found.stderr
    assert Path(found.stdout.strip()).is_relative_to(installed.parent), found.stdout
    assert not Path(found.stdout.strip()).is_relative_to(REPO)


def test_cli_and_job_help_run_outside_the_checkout(installed: Path, tmp_path: Path) -> None:
    top = _run(installed, tmp_path, "kbackup", "--help")
    assert top.returncode == 0 and "usage: kbackup" in top.stdout, top.stderr
    for job in ("backup", "restore"):
        helped = _run(installed, tmp_path, "kbackup", job, "--help")
        assert helped.returncode == 0, helped.stderr
        assert f"usage: kbackup {job}" in helped.stdout and "--bootstrap-server" in helped.stdout
        where = ["--target-dir", "t", "--topics", "orders"] if job == "backup" else ["--source-dir", str(tmp_path)]
        command = _run(installed, tmp_path, "kbackup", job, "--print-command", "--bootstrap-server", "h:1", *where)
        assert command.returncode == 0, command.stderr
        job_file = installed.parent / "lib"
        assert str(job_file) in command.stdout and f"kbackup/jobs/{job}.py" in command.stdout, command.stdout


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
        done = _run(installed, tmp_path, "kbackup", *arguments)
        assert "Traceback" not in done.stderr, f"{what}: {done.stderr}"
        assert done.returncode == 0, f"{what}: {done.stdout}{done.stderr}"
    printed = _run(installed, tmp_path, "kbackup", *runs["cat"]).stdout.splitlines()
    assert [json.loads(line)["offset"] for line in printed] == [5, 6]
    assert (tmp_path / "report.html").stat().st_size > 0
