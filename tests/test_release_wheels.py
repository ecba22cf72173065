"""What a release builds (``./dev wheels``, devkit/wheels.py) says what it is, and the pure wheel runs anywhere.

From one sdist: the platform wheel with the manylinux tag its compiled files allow (auditwheel's own check agrees),
and a ``py3-none-any`` wheel with no compiled file. The pure wheel is installed into a fresh virtual environment
(its dependencies from the package cache, as a user's pip would fetch them), run with a PATH on which no C compiler
is found: ``--help``, and a snapshot of a topic of the test broker, record for record, on the reference path.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from devkit.wheels import build
from tests.broker import BrokerUnderTest
from tests.kafka_helpers import backed_up, consume_all, create_topics
from tests.live_load import client_args

pytestmark = pytest.mark.long  # two wheels built from an sdist, a virtual environment of PySpark: minutes

COMPILERS = ("cc", "gcc", "clang", "c99")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return build(tmp_path_factory.mktemp("dist"))


def test_the_release_files_say_what_they_are(wheels: list[Path]) -> None:
    sdist, manylinux, pure = wheels
    assert sdist.name == "spark_kafka_backup-0.1.0.tar.gz"
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert manylinux.name.startswith(f"spark_kafka_backup-0.1.0-{tag}-{tag}-manylinux_2_")
    assert manylinux.name.endswith("_x86_64.whl") or manylinux.name.endswith("_aarch64.whl")
    compiled = [name for name in zipfile.ZipFile(manylinux).namelist() if name.endswith(".so")]
    assert sorted(Path(name).name.split(".")[0] for name in compiled) == ["_native_kafka", "_native_records"]
    shown = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", str(manylinux)], capture_output=True, text=True, timeout=120
    )
    assert shown.returncode == 0 and "is consistent with the following platform tag" in " ".join(shown.stdout.split())
    assert pure.name == "spark_kafka_backup-0.1.0-py3-none-any.whl"
    names = zipfile.ZipFile(pure).namelist()
    assert not [name for name in names if name.endswith((".so", ".pyd", ".c"))]
    assert "spark_kafka_backup/jobs/backup.py" in names and "spark_kafka_backup/kafka/_native_kafka.pyi" in names


def test_the_pure_wheel_runs_a_snapshot_where_no_compiler_is(
    wheels: list[Path], kafka: BrokerUnderTest, tmp_path: Path
) -> None:
    _, _, pure = wheels
    venv = tmp_path / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    installed = subprocess.run(
        [sys.executable, "-m", "uv", "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), str(pure)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    # A PATH with every tool of this machine's but its C compilers.
    bare_bin = tmp_path / "bin"
    bare_bin.mkdir()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not directory or not Path(directory).is_dir() or Path(directory) == Path(sys.executable).parent:
            continue
        for tool in Path(directory).iterdir():
            name = tool.name
            compiler = name in COMPILERS or re.fullmatch(r"(.*-)?(gcc|cc|clang|tcc|c89|c99)(-[\d.]+)?", name)
            if not compiler and not (bare_bin / name).exists() and os.access(tool, os.X_OK):
                (bare_bin / name).symlink_to(tool)
    path = f"{venv / 'bin'}{os.pathsep}{bare_bin}"
    assert not [compiler for compiler in COMPILERS if shutil.which(compiler, path=path)]
    environment = {
        key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV", "SPARK_HOME")
    }
    # No class-sharing archive for this Spark home: it is a start-up cost of a warm-up job (tests/test_launcher.py).
    environment.update(PATH=path, KBACKUP_JVM_ARCHIVE="off")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def command(*args: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(venv / "bin" / "spark-kafka-backup"), *map(str, args)],
            capture_output=True, text=True, env=environment, cwd=elsewhere, timeout=600,
        )  # fmt: skip

    helped = command("--help")
    assert helped.returncode == 0 and "usage: spark-kafka-backup" in helped.stdout, helped.stderr
    edges = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import spark_kafka_backup, spark_kafka_backup.kafka.columnar as c, spark_kafka_backup.format.record_columns"
         " as r; print(spark_kafka_backup.__file__); print(c.native_edge()); print(r._native_records)"],
        capture_output=True, text=True, env=environment, cwd=elsewhere, timeout=120,
    )  # fmt: skip
    where, native, scanner = edges.stdout.split("\n")[:3]
    assert where.startswith(str(venv)) and native == "None" and scanner == "None", edges.stdout + edges.stderr

    topic = "pure-wheel"
    create_topics(kafka, {topic: 2})
    from confluent_kafka import Producer

    producer = Producer(kafka.client_settings())
    for i in range(500):
        producer.produce(topic, key=b"%d" % i, value=b"pure-%d" % i, partition=i % 2, headers=[("h", b"1")])
    assert producer.flush(30) == 0
    target = tmp_path / "backup"
    done = command(
        "backup", "--master", "local[2]", *client_args(kafka, tmp_path), "--target-dir", target, "--topics", topic,
        "--snapshot",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert backed_up(target, [topic]) == consume_all(kafka, [topic])
