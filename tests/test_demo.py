"""The README's first command, ``./dev demo``, runs end to end."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.kafka_helpers import run_kbackup


# CI time: in the long tier; the quick tier covers the backup and restore it runs: tests/test_restore.py's round trip
@pytest.mark.long
def test_demo_backs_up_the_sample_topics(tmp_path: Path) -> None:
    """``./dev demo`` as the README gives it, from a shell that has nothing of this one but the cache of jars."""
    fresh = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", str(tmp_path))}
    for name in ("KBACKUP_CACHE", "JAVA_HOME"):
        if name in os.environ:
            fresh[name] = os.environ[name]
    result = subprocess.run(
        ["./dev", "demo", "--target", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        env=fresh,
        cwd=REPO,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
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
