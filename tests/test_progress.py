"""Progress output: a bar redrawn in place on a terminal, plain lines elsewhere, always on standard error."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.progress import Progress
from tests.kafka_helpers import job_env


def test_lines_when_not_a_terminal() -> None:
    stream = io.StringIO()
    with Progress("verify", 3, "partitions", stream=stream, terminal=False, min_interval=0) as shown:
        for name in ("t/0", "t/1", "t/2"):
            shown.advance(note=name)
    assert stream.getvalue().splitlines() == [
        "verify: 1/3 partitions (t/0)",
        "verify: 2/3 partitions (t/1)",
        "verify: 3/3 partitions (t/2)",
    ]


def test_lines_are_throttled_but_the_last_step_always_shows() -> None:
    stream = io.StringIO()
    shown = Progress("prune", 1000, "segments", stream=stream, terminal=False, min_interval=3600)
    for _ in range(1000):
        shown.advance()
    assert stream.getvalue().splitlines() == ["prune: 1/1000 segments", "prune: 1000/1000 segments"]


def test_bar_on_a_terminal() -> None:
    stream = io.StringIO()
    with Progress("restore", 4, "partitions", stream=stream, terminal=True, min_interval=0) as shown:
        shown.advance()
        shown.advance(3)
    out = stream.getvalue()
    assert "\r\x1b[2Krestore [#####...............] 1/4 partitions" in out
    assert "\r\x1b[2Krestore [####################] 4/4 partitions" in out
    assert out.endswith("\n") and out.count("\n") == 1


def test_disabled_progress_writes_nothing() -> None:
    stream = io.StringIO()
    with Progress("x", 2, "steps", stream=stream, enabled=False) as shown:
        shown.advance(2)
    assert stream.getvalue() == "" and shown.done == 2


def _backup(root: Path) -> None:
    for partition in range(3):
        with PartitionWriter(root / "t", "t", partition, fsync=False) as writer:
            writer.append(Record(0, 0, 1, b"k", b"v", ()))


def test_verify_shows_a_bar_on_a_terminal_and_lines_in_a_pipe(tmp_path: Path) -> None:
    _backup(tmp_path)
    command = [sys.executable, "-m", "spark_kafka_backup", "verify", str(tmp_path)]
    piped = subprocess.run(command, capture_output=True, text=True, env=job_env(), timeout=60)
    assert piped.returncode == 0, piped.stderr
    assert piped.stderr.splitlines()[-1] == "verify: 3/3 partitions (t/2)"
    assert "t/0: ok" in piped.stdout and "/3 partitions" not in piped.stdout  # the report on stdout, progress off it

    controller, terminal = pty.openpty()
    try:
        process = subprocess.run(command, stdout=subprocess.PIPE, stderr=terminal, env=job_env(), timeout=60)
        os.close(terminal)
        terminal = -1
        seen = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        if terminal >= 0:
            os.close(terminal)
        os.close(controller)
    assert process.returncode == 0
    assert b"\x1b[2Kverify [####################] 3/3 partitions" in seen
    assert b"verify: 3/3" not in seen
