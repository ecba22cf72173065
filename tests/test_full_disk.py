"""A full disk under the backup: one error line, no temporary files, and an exact backup once space is freed.

The target is a small tmpfs mounted in a private mount namespace (``unshare -Urm``: no privileges needed where
user namespaces are allowed), so the backup meets a real ``ENOSPC`` from the kernel. The whole scenario runs in
one shell inside the namespace (the mount is gone when it exits): back up into 1 MiB, list temporary files,
grow the file system ("space freed"), back up again, copy the result out.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.broker import BrokerUnderTest
from tests.conftest import REPO
from tests.kafka_helpers import backed_up, backup_command, consume_all, create_topics, job_env


@pytest.mark.long
def test_a_full_disk_is_one_line_leaves_no_temporary_files_and_the_rerun_is_exact(
    kafka: BrokerUnderTest, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    topic = "full-disk"
    create_topics(kafka, {topic: 2})
    producer = Producer(kafka.client_settings(**{"enable.idempotence": "true", "linger.ms": "20"}))
    for i in range(4000):
        producer.produce(topic, key=b"k%d" % i, value=b"%06d" % i * 170, partition=i % 2)  # ~1 KB each: 4 MB
    assert producer.flush(30) == 0
    target, copy, out = tmp_path / "target", tmp_path / "copy", tmp_path / "out"
    for directory in (target, copy, out):
        directory.mkdir()
    # Spark's checkpoint on a disk with space: the full one is spark-kafka-backup's.
    arguments: list[str | Path] = [
        "--bootstrap-server", kafka.bootstrap_servers, "--target-dir", target, "--topics", topic,
        "--snapshot", "--checkpoint-location", tmp_path / "spark",
    ]  # fmt: skip
    command = shlex.join(backup_command(*arguments))
    script = f"""
        mount -t tmpfs -o size=1m kbackup-full {target} || exit 97
        {command} > {out}/first.log 2>&1; echo $? > {out}/first.rc
        find {target} -name '*.kbackup-tmp' > {out}/tmp-files
        mount -o remount,size=64m {target}
        {command} > {out}/second.log 2>&1; echo $? > {out}/second.rc
        cp -a {target}/. {copy}/
    """
    done = subprocess.run(["unshare", "-Urm", "sh", "-c", script], env=job_env(), cwd=REPO, timeout=900,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    first = (out / "first.log").read_text()
    assert (out / "first.rc").read_text().strip() == "1", first[-3000:]
    errors = [line for line in first.splitlines() if line.startswith("spark-kafka-backup backup: error:")]
    assert len(errors) == 1, first[-3000:]
    assert f"{target}/" in errors[0] and "no space left on its file system (" in errors[0], errors[0]
    assert "bytes free" in errors[0]
    assert "Traceback" not in without_spark_daemon_noise(first)
    assert (out / "tmp-files").read_text() == ""
    second = (out / "second.log").read_text()
    assert (out / "second.rc").read_text().strip() == "0", second[-3000:]
    assert backed_up(copy, [topic]) == consume_all(kafka, [topic])


def without_spark_daemon_noise(log: str) -> str:
    """The log less what PySpark's worker daemon prints when the JVM closes a worker's socket as the failed job stops
    (a traceback whose frames are all in pyspark/daemon.py, after a line saying so or alone, as Spark's
    killWorkerOnFlushFailure decides): a machine under load shows it; it is Spark's and says nothing of the failure."""
    return re.sub(
        r"(?:PySpark daemon failed to flush the output to the worker process:\n)?"
        r"Traceback \(most recent call last\):\n"
        r"(?:  File \"[^\"\n]*pyspark/daemon\.py\".*\n(?:    .*\n)*)+"
        r"\w+(?:Error|Exception)\b.*\n",
        "",
        log,
    )
