"""Retention: prune deletes old segments no retained checkpoint needs, and the backup still verifies and restores."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spark_kafka_backup.catalog import checkpoints
from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.prune import intent_path, plan_prune
from spark_kafka_backup.catalog.store import read_catalog
from spark_kafka_backup.format.partition_index import encode_partition_index
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.offsets_file import write_consumer_offsets
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.storage import as_local
from tests.broker import BrokerUnderTest
from tests.conftest import REPO
from tests.kafka_helpers import client_config_file, job_env, run_kbackup

NOW = int(time.time() * 1000)
OLD = NOW - 10 * 86_400_000


def write_old_backup(root: Path) -> None:
    """Topic 't' partition 0: 40 records in ~8 segments; the first 20 records are 10 days old."""
    with PartitionWriter(root / "t", "t", 0, max_segment_size=300, fsync=False, ledger=CatalogLedger(root)) as writer:
        for i in range(40):
            writer.append(Record(i, 0, (OLD if i < 20 else NOW) + i, b"k%d" % i, b"v" * 40))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "backup"
    write_old_backup(root)
    return root


def _segments(root: Path) -> list[tuple[int | None, int | None]]:
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None
    return [(e.first_offset, e.last_offset) for e in catalog.segments]


def test_old_segments_go_and_the_rest_still_verifies(root: Path) -> None:
    before = _segments(root)
    old = [span for span in before if span[1] is not None and span[1] < 20]
    assert len(old) >= 3
    dry = run_kbackup("prune", root, "--older-than", "7d", "--dry-run")
    assert dry.returncode == 0
    assert dry.stdout.count("would delete t/0 ") == len(old)
    assert _segments(root) == before  # a dry run deletes nothing
    done = run_kbackup("prune", root, "--older-than", "7d")
    assert done.returncode == 0, done.stderr
    assert _segments(root) == before[len(old) :]
    first_kept = before[len(old)][0]
    assert [r.offset for r in PartitionReader(root / "t", 0).records()] == list(range(first_kept or 0, 40))
    # What it let go is kept in the catalog: a restore says what a group committed below it skips.
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None and catalog.pruned is not None
    assert first_kept is not None
    assert (catalog.pruned.first_offset, catalog.pruned.last_offset, catalog.pruned.records) == (
        0, first_kept - 1, first_kept
    )  # fmt: skip
    assert len(list((root / "t").glob("*_records"))) == len(before) - len(old) + 1
    verified = run_kbackup("verify", root, "--deep")
    assert verified.returncode == 0, verified.stdout


def test_a_retained_checkpoint_keeps_what_its_groups_had_not_consumed(root: Path) -> None:
    before = _segments(root)
    # At this checkpoint a group had consumed up to offset 9: offsets 9.. were still needed.
    checkpoints.record_completed(root, {"g": {("t", 0): 9}}, {("t", 0): 30}, NOW)
    doomed, _ = plan_prune(root, ["t"], cutoff_ms=NOW - 7 * 86_400_000, keep_checkpoints=None)
    assert [item.entry.last_offset for item in doomed] == [last for _, last in before if last is not None and last < 9]
    assert all((item.entry.last_offset or 0) < 9 for item in doomed)


def test_keep_checkpoints_drops_older_checkpoints_and_what_only_they_needed(root: Path) -> None:
    old = checkpoints.record_completed(root, {"g": {("t", 0): 2}}, {("t", 0): 25}, NOW - 1000)
    new = checkpoints.record_completed(root, {"g": {("t", 0): 15}}, {("t", 0): 38}, NOW)
    result = run_kbackup("prune", root, "--keep-checkpoints", "1")
    assert result.returncode == 0, result.stderr
    assert f"deleting checkpoint {old.id}" in result.stdout
    assert re.fullmatch(r"deleted \d+ segments? and 1 checkpoint: \d+ bytes? freed", result.stdout.splitlines()[-1])
    assert [c.id for c in checkpoints.list_checkpoints(root)] == [new.id]
    remaining = _segments(root)
    assert remaining[0][0] is not None and remaining[0][0] <= 15 <= (remaining[0][1] or 0)  # 15 is still there
    assert run_kbackup("verify", root).returncode == 0


def test_without_an_age_what_came_after_the_newest_checkpoint_stays(root: Path) -> None:
    """``--keep-checkpoints`` alone lets go only of what comes before the newest retained cut: the records backed up
    since are the backup's latest state (a continuous backup's recovery point), and a backup with no checkpoint keeps
    everything."""
    before = _segments(root)
    assert run_kbackup("prune", root, "--keep-checkpoints", "3").stdout.endswith(
        "deleted 0 segments and 0 checkpoints: 0 bytes freed\n"
    )
    assert _segments(root) == before
    checkpoints.record_completed(root, {}, {("t", 0): 25}, NOW)
    doomed, _ = plan_prune(root, ["t"], cutoff_ms=None, keep_checkpoints=3)
    expected = [last for _, last in before if last is not None and last < 25]
    assert [item.entry.last_offset for item in doomed] == expected and expected
    done = run_kbackup("prune", root, "--keep-checkpoints", "3")
    assert done.returncode == 0, done.stderr
    first, _ = _segments(root)[0]
    assert first is not None and first <= 25
    assert [r.offset for r in PartitionReader(root / "t", 0).records()] == list(range(first, 40))
    # The latest stored consumer offsets are the latest state's groups: what they had not consumed stays.
    write_consumer_offsets(root / "t", 0, {"g": 30})
    checkpoints.record_completed(root, {}, {("t", 0): 39}, NOW)
    doomed, _ = plan_prune(root, ["t"], cutoff_ms=None, keep_checkpoints=1)
    assert doomed and all((item.entry.last_offset or 0) < 30 for item in doomed)
    assert max(item.entry.last_offset or 0 for item in doomed) >= 25  # more goes than the first checkpoint kept
    # With an age, the age decides the records after the cut (the first 20 are old; those after 25 are not).
    doomed, _ = plan_prune(root, ["t"], cutoff_ms=NOW - 7 * 86_400_000, keep_checkpoints=3)
    assert doomed == []


def test_an_interrupted_prune_is_noted_and_finished_next_time(root: Path) -> None:
    doomed, _ = plan_prune(root, ["t"], cutoff_ms=NOW - 7 * 86_400_000, keep_checkpoints=None)
    names = {item.entry.name for item in doomed}
    # Crash after the intent and the new partition index, before the catalog and the files.
    as_local(intent_path(root)).write_text(
        json.dumps({"segments": [["t", 0, n] for n in sorted(names)], "checkpoints": []})
    )
    reader = PartitionReader(root / "t", 0)
    (root / "t" / "index_partition_000").write_bytes(
        encode_partition_index([s for s in reader.segments if s.name not in names])
    )
    verified = run_kbackup("verify", root)
    assert verified.returncode == 0, verified.stdout
    assert "being deleted or written by an unfinished prune, merge or erase" in verified.stdout
    finished = run_kbackup("prune", root, "--older-than", "30d")
    assert finished.stdout.startswith("finished an interrupted prune")
    assert not as_local(intent_path(root)).exists()
    assert not any((root / "t" / f"{n}_records").exists() for n in names)
    deep = run_kbackup("verify", root, "--deep")
    assert deep.returncode == 0, deep.stdout + deep.stderr
    assert "t/0: ok" in deep.stdout and "unfinished prune, merge or erase" not in deep.stdout


def test_a_pruned_backup_still_plans_a_restore(root: Path, kafka: BrokerUnderTest, tmp_path: Path) -> None:
    write_consumer_offsets(root / "t", 0, {"early": 5, "late": 35}, sync=False)
    assert run_kbackup("prune", root, "--older-than", "7d").returncode == 0
    remaining = sum(1 for _ in PartitionReader(root / "t", 0).records())
    config = tmp_path / "client.properties"
    client_config_file(config, kafka.extra_settings)
    result = subprocess.run(
        [sys.executable, str(REPO / "jobs" / "restore.py"), "--bootstrap-server", kafka.bootstrap_servers,
         "--command-config", str(config), "--source-dir", str(root), "--topic-map", "t=pruned-t", "--dry-run",
         "--topic-config", "retention.ms=-1"],  # the records are days old: kept, not deleted by retention
        capture_output=True, text=True, cwd=REPO, env=job_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"t/0 -> pruned-t/0: {remaining} records" in result.stdout
    # A group committed inside what the prune let go is told how many records it skips; one above it is not.
    pruned = 40 - remaining
    said = f"group early: t/0 committed at 5, but prune let go of offsets 0..{pruned - 1} ({pruned} records)"
    assert said in result.stdout and f"skips up to {pruned} of those records" in result.stdout, result.stdout
    assert "group late: t/0 committed" not in result.stdout


def test_prune_needs_a_rule(root: Path) -> None:
    result = run_kbackup("prune", root)
    assert result.returncode == 1
    assert "say what to prune" in result.stderr
