"""The README's first command, ``./dev demo``, runs end to end."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from tests.conftest import REPO
from tests.kafka_helpers import run_kbackup


# CI time: in the long tier; the quick tier covers the backup and restore it runs: tests/test_restore.py's round trip
@pytest.mark.long
def test_demo_backs_up_the_sample_topics(tmp_path: Path) -> None:
    """``./dev demo`` as the README gives it, from a shell that has nothing of this one but the cache of jars."""
    # spark-kafka-backup's cache empty, as on a fresh machine: Kafka's jars are fetched and the class archive of
    # Spark's driver JVM made, minutes of work that must not be minutes of silence.
    fresh = {
        "PATH": "/usr/bin:/bin",
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "KBACKUP_CACHE": str(tmp_path / "cache"),
    }
    if "JAVA_HOME" in os.environ:
        fresh["JAVA_HOME"] = os.environ["JAVA_HOME"]
    process = subprocess.Popen(
        ["./dev", "demo", "--target", str(tmp_path / "demo")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=fresh,
        cwd=REPO,
    )
    heard: list[tuple[float, str, str]] = []  # (when, stream, line) as the demo says them

    def listen(stream: IO[str] | None, name: str) -> None:
        assert stream is not None
        for line in stream:
            heard.append((time.monotonic(), name, line))

    began = time.monotonic()
    readers = [threading.Thread(target=listen, args=(process.stdout, "out")),
               threading.Thread(target=listen, args=(process.stderr, "err"))]  # fmt: skip
    for reader in readers:
        reader.start()
    try:
        returncode = process.wait(900)
    finally:
        if process.poll() is None:
            process.kill()
        for reader in readers:
            reader.join(30)
    out = "".join(line for _, name, line in heard if name == "out")
    said = "".join(line for _, _, line in heard)
    assert returncode == 0, said[-6000:]
    times = [began, *sorted(when for when, _, _ in heard), time.monotonic()]
    silences = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert max(silences) < 30, (max(silences), said)
    assert "making a class-sharing archive for Spark's driver JVM" in said and "about 160 MB" in said, said
    assert f"keeps what it fetches and makes once in {tmp_path / 'cache'}" in out, out
    assert "snapshot: orders: 3 partitions, 3000 records" in out
    assert "orders\n  partition 0: 1000 records, offsets 0..999" in out
    assert "audit\n  partition 0: 0 records, empty" in out
    assert "orders\t0\tshipping\t250" in out and "orders\t2\tbilling\t1000" in out
    payments = [line for line in out.splitlines() if line.startswith("  partition 0: 80 records")]
    assert payments, "the aborted transaction's 10 payments must not be in the backup"
    # Its markers and aborted records are offsets the source skipped: said as such, never as missing.
    assert payments[0].startswith("  partition 0: 80 records, offsets 0..91, 12 transaction offsets: 40..51, ")
    assert "missing" not in out
    report = tmp_path / "report.html"
    assert run_kbackup("report", tmp_path / "demo", "-o", report).returncode == 0
    page = report.read_text()
    assert '<span class="skipped">12 transaction offsets: 40..51</span>' in page and 'class="bad"' not in page
    # Its last lines are commands for a new shell: pasted into one (nothing of this environment), they work.
    source, show = out.rstrip().splitlines()[-2:]
    assert source.strip().startswith("source ") and show.strip().startswith("spark-kafka-backup cat ")
    pasted = subprocess.run(
        ["bash", "-c", f"{source.strip()}\n{show.strip()}"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        cwd=tmp_path,
        timeout=120,
    )
    assert pasted.returncode == 0, pasted.stderr
    records = [json.loads(line) for line in pasted.stdout.splitlines()]
    assert len(records) == 80 and {r["topic"] for r in records} == {"payments"}


def test_a_quiet_command_gets_a_line_every_interval_and_its_own_output_and_exit_code_pass_through() -> None:
    """devkit/heartbeat.py, which ./dev setup runs its install under (standard library only: before .venv exists)."""
    began = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(REPO / "devkit" / "heartbeat.py"), "--every", "1", "--what", "sleeping", "--",
         "sh", "-c", "echo first; sleep 3.6; echo second >&2; exit 3"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert time.monotonic() - began >= 3.5
    assert result.returncode == 3
    assert result.stdout == "first\n"
    beats = [line for line in result.stderr.splitlines() if line.startswith("  ... still sleeping (")]
    assert 2 <= len(beats) <= 4, result.stderr
    assert result.stderr.splitlines()[-1] == "second"
    missing = subprocess.run([sys.executable, str(REPO / "devkit" / "heartbeat.py"), "--what", "x", "--", "/no/such"],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    assert missing.returncode == 127 and missing.stderr.startswith("heartbeat: cannot run /no/such:"), missing.stderr
