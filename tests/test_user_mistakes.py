"""Ordinary mistakes end in one line on standard error that names what is wrong: never a traceback.

The jobs are run by plain Python: each of these is refused before Spark starts and before the cluster is asked
(the bootstrap server given does not exist).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.kafka_helpers import job_env

NOWHERE = "127.0.0.1:1"


def job(name: str, *args: str | Path, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [*prefix, sys.executable, str(REPO / "jobs" / f"{name}.py"), *map(str, args)],
        capture_output=True,
        text=True,
        env=job_env(),
        timeout=60,
    )
    assert "Traceback" not in result.stdout + result.stderr
    assert "SparkContext" not in result.stdout + result.stderr
    return result


def the_error(result: subprocess.CompletedProcess[str], name: str) -> str:
    errors = [line for line in result.stderr.splitlines() if f"spark-kafka-backup {name}: error:" in line]
    assert len(errors) == 1, result.stderr
    return errors[0].split(f"spark-kafka-backup {name}: error: ", 1)[1]


def backup(target: Path | str, *more: str | Path) -> subprocess.CompletedProcess[str]:
    return job("backup", "--bootstrap-server", NOWHERE, "--topics", "orders", "--snapshot", "--target-dir", target,
               *more)  # fmt: skip


def test_a_target_that_is_a_file_or_under_one(tmp_path: Path) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("x")
    result = backup(file)
    assert result.returncode == 1
    assert the_error(result, "backup") == f"{file}: the backup target is a file, not a directory"
    result = backup(file / "backup")
    assert result.returncode == 1
    assert the_error(result, "backup") == (
        f"{file / 'backup'}: the backup target cannot be created: {file} is a file, not a directory"
    )
    assert file.read_text() == "x"


def test_a_target_inside_a_backup_and_a_topic_directory_given_as_the_backup(tmp_path: Path) -> None:
    from spark_kafka_backup.partition.writer import PartitionWriter

    root = tmp_path / "backups" / "prod"
    with PartitionWriter(root / "orders", "orders", 0, fsync=False) as writer:
        writer.ensure_segment(0)
    (root / "kbackup~state" / "catalog").mkdir(parents=True)
    result = backup(root / "orders")  # a second backup there would be lost to every read command
    assert result.returncode == 1, result.stderr
    assert the_error(result, "backup") == (
        f"--target-dir {root / 'orders'} is inside the backup {root}: back up into {root} itself (it takes more "
        "topics), or into a directory outside it"
    )
    assert not (root / "orders" / "kbackup~state").exists()
    # Beside it (reached through ".." from inside it) is no backup of it: the next check, the cluster, fails instead.
    beside = backup(root / "orders" / ".." / ".." / "staging")
    assert "is inside the backup" not in beside.stderr and "cannot reach Kafka at" in the_error(beside, "backup")
    result = job("restore", "--bootstrap-server", NOWHERE, "--source-dir", root / "orders")
    assert result.returncode == 1, result.stderr
    assert the_error(result, "restore") == (
        f"--source-dir {root / 'orders'} is a topic's directory of the backup {root}, not a backup: give "
        f"--source-dir {root} (with --topics orders to restore only that topic)"
    )


def test_a_target_where_nothing_may_be_written(tmp_path: Path) -> None:
    result = backup("/proc/kbackup-target")  # not permitted to anyone, root included
    assert result.returncode == 1
    assert the_error(result, "backup").startswith(
        "/proc/kbackup-target: the backup target is not usable: cannot create directories in /proc: "
    )
    if shutil.which("unshare") is None:
        pytest.skip("no unshare: the read-only file system case needs a mount namespace")
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    script = f'mount -t tmpfs -o ro tmpfs {read_only} && exec "$@"'
    result = job("backup", "--bootstrap-server", NOWHERE, "--topics", "orders", "--snapshot",
                 "--target-dir", read_only / "backup",
                 prefix=("unshare", "-Urm", "sh", "-c", script, "sh"))  # fmt: skip
    assert result.returncode == 1
    assert the_error(result, "backup") == (
        f"{read_only / 'backup'}: the backup target is not usable: no permission to create directories in {read_only}"
    )


def test_a_restore_state_directory_that_is_a_file(tmp_path: Path) -> None:
    file = tmp_path / "state"
    file.write_text("x")
    result = job("restore", "--bootstrap-server", NOWHERE, "--source-dir", tmp_path, "--state-dir", file)
    assert result.returncode == 1
    assert the_error(result, "restore") == f"{file}: the restore state directory is a file, not a directory"


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (
            "# the cluster's client settings\nno.such.client.setting=1\n",
            2,
            'no.such.client.setting: No such configuration property: "no.such.client.setting"',
        ),
        (
            "security.protocol=BOGUS\n",
            1,
            'security.protocol: Invalid value "BOGUS" for configuration property "security.protocol"',
        ),
        (
            "client.id=spark-kafka-backup\n\nthis is a line of text garbage\n",
            3,
            'this: No such configuration property: "this"',
        ),
    ],
)
@pytest.mark.parametrize("name", ["backup", "restore"])
def test_a_client_setting_librdkafka_refuses_is_named_with_file_and_line(
    name: str, text: str, line: int, message: str, tmp_path: Path
) -> None:
    config = tmp_path / "client.properties"
    config.write_text(text)
    where: list[str | Path] = (
        ["--target-dir", tmp_path / "backup", "--topics", "orders"] if name == "backup" else ["--source-dir", tmp_path]
    )
    result = job(name, "--bootstrap-server", NOWHERE, "--command-config", config, *where)
    assert result.returncode == 2
    assert the_error(result, name) == f"{config} line {line}: {message} (a Kafka client setting)"
    assert not (tmp_path / "backup").exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("dmg=abc", "--partitions dmg=abc: expected a whole number > 0, got 'abc'"),
        ("dmg=0", "--partitions dmg=0: expected a whole number > 0, got '0'"),
    ],
)
def test_a_partition_count_that_is_not_a_number(value: str, message: str, tmp_path: Path) -> None:
    result = job("restore", "--bootstrap-server", NOWHERE, "--source-dir", tmp_path, "--partitions", value)
    assert result.returncode == 2
    assert the_error(result, "restore") == message
