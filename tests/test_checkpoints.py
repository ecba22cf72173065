"""Checkpoints: ids, lifecycle, the cut, and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark_kafka_backup.catalog import checkpoints
from spark_kafka_backup.errors import BackupNotFoundError
from spark_kafka_backup.partition.layout import state_dir
from spark_kafka_backup.storage import as_local
from spark_kafka_backup.storage.lease import TargetLease
from tests.kafka_helpers import run_kbackup


def test_requests_get_increasing_ids_and_move_through_their_lifecycle(tmp_path: Path) -> None:
    first = checkpoints.request(tmp_path)
    second = checkpoints.request(tmp_path)
    assert (first.id, second.id, first.status) == (1, 2, "requested")
    taken = checkpoints.take(tmp_path, first, {"g": {("t", 0): 5}}, {("t", 0): 9, ("t", 1): 0}, 1234)
    assert checkpoints.read_checkpoint(tmp_path, 1) == taken
    assert taken.status == "pending"
    done = checkpoints.finish(tmp_path, taken)
    checkpoints.finish(tmp_path, second, failed_reason="the backup stopped before it reached the cut")
    assert [(c.id, c.status, c.reason) for c in checkpoints.list_checkpoints(tmp_path)] == [
        (1, "completed", None),
        (2, "failed", "the backup stopped before it reached the cut"),
    ]
    assert done.groups == {"g": {("t", 0): 5}} and done.ends == {("t", 0): 9, ("t", 1): 0}
    assert checkpoints.latest_completed_before(tmp_path, 1233) is None
    assert checkpoints.latest_completed_before(tmp_path, 2000) == done


def test_an_id_taken_meanwhile_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checkpoints.request(tmp_path)
    real_link = os.link
    calls: list[Path] = []

    def racing_link(source: str, target: Path) -> None:
        if not calls:  # another process claims the same id first
            calls.append(target)
            Path(target).write_bytes(checkpoints.Checkpoint(2, "requested", 1).encode())
        real_link(source, target)

    monkeypatch.setattr(os, "link", racing_link)
    mine = checkpoints.request(tmp_path)
    assert mine.id == 3
    assert [c.id for c in checkpoints.list_checkpoints(tmp_path)] == [1, 2, 3]


def test_missing_checkpoint_is_named(tmp_path: Path) -> None:
    with pytest.raises(BackupNotFoundError, match="checkpoint 7 does not exist"):
        checkpoints.read_checkpoint(tmp_path, 7)


def test_cli(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return run_kbackup(*args)

    with TargetLease(state_dir(tmp_path), checkpoints.CONTINUOUS_BACKUP):  # what a running continuous backup holds
        assert run("checkpoint", "create", str(tmp_path)).stdout.startswith("checkpoint 1 requested")
    checkpoints.record_completed(tmp_path, {"g": {("t", 0): 3}}, {("t", 0): 10}, 1_795_334_400_000)
    listing = run("checkpoint", "list", str(tmp_path)).stdout.splitlines()
    assert listing[0].split("\t")[2] == "requested"
    assert listing[1].split("\t")[1:] == ["2026-11-22T08:00:00Z", "completed", "1 partition"]
    described = json.loads(run("checkpoint", "describe", str(tmp_path), "2").stdout)
    assert described["groups"] == {"g": {"t": {"0": 3}}} and described["ends"] == {"t": {"0": 10}}
    missing = run("checkpoint", "describe", str(tmp_path), "9")
    assert missing.returncode == 1 and "checkpoint 9 does not exist" in missing.stderr


def test_listing_above_an_id_reads_only_newer_checkpoints(tmp_path: Path) -> None:
    for _ in range(3):
        checkpoints.request(tmp_path)
    as_local(checkpoints.checkpoint_path(tmp_path, 1)).write_text("not json")  # never read when listing above 1
    assert [c.id for c in checkpoints.list_checkpoints(tmp_path, above=1)] == [2, 3]


def test_a_checkpoint_is_refused_when_no_continuous_backup_runs(tmp_path: Path) -> None:
    """Nothing would ever take the cut: one line and exit 1 instead of a request that stays ``requested``."""

    def create() -> subprocess.CompletedProcess[str]:
        return run_kbackup("checkpoint", "create", tmp_path)

    def refused(result: subprocess.CompletedProcess[str]) -> bool:
        lines = result.stderr.strip().splitlines()
        return result.returncode == 1 and len(lines) == 1 and "no continuous backup is running" in lines[0]

    assert refused(create())  # nothing ever ran
    with TargetLease(state_dir(tmp_path), "snapshot backup"):
        assert refused(create())  # a snapshot does not serve requests
    # A continuous backup killed with kill -9 leaves its lease file behind, naming a process that is gone.
    dead = subprocess.Popen(
        [sys.executable, "-c",
         "import time; from pathlib import Path; from spark_kafka_backup.storage.lease import TargetLease\n"
         f"TargetLease(Path({str(state_dir(tmp_path))!r}), 'continuous backup').acquire(); print('held', flush=True); "
         "time.sleep(600)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert dead.stdout is not None and dead.stdout.readline() == "held\n"
    running = create()
    assert running.returncode == 0 and f"(pid {dead.pid}) takes its cut" in running.stdout, running.stderr
    dead.kill()
    dead.wait()
    assert (tmp_path / "kbackup~state" / "lease").exists()
    assert refused(create())
    assert [c.status for c in checkpoints.list_checkpoints(tmp_path)] == ["requested"]
