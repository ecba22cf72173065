"""``spark-kafka-backup merge``: small finished segments merged offline on real files, the backup identical record by
record.

The S3 API server's half is in test_object_storage.py (a merge on the store, and a restore to the real broker from a
merged backup).
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.merge import plan_merge
from spark_kafka_backup.catalog.store import read_catalog
from spark_kafka_backup.catalog.verify import verify_backup
from spark_kafka_backup.format.encryption import KeyRing, key_id
from spark_kafka_backup.format.frames import is_framed
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.layout import list_segment_files, partition_index_path
from spark_kafka_backup.partition.merge_intent import intent_path, write_intent
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.rebuild import rebuild_partition_index
from spark_kafka_backup.partition.records_file import NO_KEYS
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.storage import as_local
from tests.conftest import REPO
from tests.kafka_helpers import kbackup_in_process, run_kbackup
from tests.recordgen import sample_record

RECORDS = 240
KEK = bytes(range(7, 39))


def _write(root: Path, offsets: range, **options: object) -> None:
    with PartitionWriter(root / "t", "t", 0, max_segment_size=2000, fsync=False, ledger=CatalogLedger(root),
                         **options) as writer:  # type: ignore[arg-type]  # fmt: skip
        for i in offsets:
            writer.append(sample_record(i))


def _records(root: Path, keys: KeyRing = NO_KEYS) -> list[Record]:
    return list(PartitionReader(root / "t", 0, keys=keys).records())


def _names(root: Path) -> list[str]:
    return [segment.name for segment in PartitionReader(root / "t", 0).segments]


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    """Partition t/0: plain segments, then zstd ones after a reopen (about 2 KB each)."""
    root = tmp_path / "backup"
    _write(root, range(0, RECORDS // 2))
    _write(root, range(RECORDS // 2, RECORDS), compression="zstd")
    return root


def test_small_segments_merge_into_segments_of_the_size_and_every_reader_gets_the_same_records(mixed: Path) -> None:
    before, names = _records(mixed), _names(mixed)
    assert len(names) > 12
    catalog = read_catalog(mixed, "t", 0)
    assert catalog is not None
    dry = run_kbackup("merge", mixed, "--max-segment-size", "9000", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert _names(mixed) == names and "would merge t/0 " in dry.stdout
    assert re.fullmatch(r"\d+ segments would be merged into \d+ segments?", dry.stdout.splitlines()[-1])

    done = run_kbackup("merge", mixed, "--max-segment-size", "9000")
    assert done.returncode == 0, done.stderr
    after = _names(mixed)
    assert len(after) < len(names) / 2 and after[-1] == names[-1]  # the newest segment is left as it is
    assert _records(mixed) == before
    # Nothing left to merge: the dry run says so in a zero summary, as prune's does.
    again = run_kbackup("merge", mixed, "--max-segment-size", "9000", "--dry-run")
    assert again.returncode == 0 and again.stdout == "0 segments would be merged into 0 segments\n", again.stdout
    # From an offset: a seek plus one segment, as before.
    assert list(PartitionReader(mixed / "t", 0).records(from_offset=301)) == [r for r in before if r.offset >= 301]
    merged = read_catalog(mixed, "t", 0)
    assert merged is not None and [e.name for e in merged.segments] == after[:-1]
    sizes = [e.plain_bytes or e.records_bytes for e in merged.segments]
    assert max(sizes) <= 9000 and sum(e.records for e in merged.segments) == sum(e.records for e in catalog.segments)
    # A group mixing plain and zstd sources is written with the codec; a group of plain ones stays plain.
    assert {e.compression for e in merged.segments} == {None, "zstd"}
    assert all(report.ok and not report.notes for report in verify_backup(mixed, ["t"], deep=True))
    assert len(list_segment_files(mixed / "t", 0)) == len(after)  # the old files are gone
    assert not as_local(intent_path(mixed)).exists()
    listed = run_kbackup("ls", mixed)
    assert f"{len(after)} segments" in listed.stdout or listed.returncode == 0

    # The partition index rebuilt from the files is the same; merging again finds nothing more at that size.
    index = as_local(partition_index_path(mixed / "t", 0)).read_bytes()
    rebuild_partition_index(mixed / "t", 0)
    assert as_local(partition_index_path(mixed / "t", 0)).read_bytes() == index
    assert plan_merge(mixed, ["t"], max_segment_size=9000) == []
    # A backup goes on appending to the merged partition.
    _write(mixed, range(RECORDS, RECORDS + 40))
    assert _records(mixed) == before + [sample_record(i) for i in range(RECORDS, RECORDS + 40)]
    again = run_kbackup("merge", mixed, "--max-segment-size", "30000")
    assert again.returncode == 0 and "_merged_2" in again.stdout, again.stdout + again.stderr
    assert _records(mixed) == before + [sample_record(i) for i in range(RECORDS, RECORDS + 40)]
    assert all(report.ok for report in verify_backup(mixed, ["t"], deep=True))


def test_encrypted_segments_are_merged_with_their_key_and_stay_sealed(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    _write(root, range(RECORDS), compression="lz4", encryption_key=KEK)
    before_names = _names(root)
    refused = kbackup_in_process("merge", root)
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and key_id(KEK).hex() in lines[0] and "Traceback" not in refused.stderr, refused.stderr
    assert _names(root) == before_names and not as_local(intent_path(root)).exists()
    assert not any(".tmp" in p.name for p in (root / "t").iterdir())

    key_file = tmp_path / "kek.hex"
    key_file.write_text(KEK.hex())
    done = kbackup_in_process("merge", root, "--encryption-key-file", key_file)
    assert done.returncode == 0, done.stderr
    catalog = read_catalog(root, "t", 0)
    # The newest sealed segment stays as it is: the partition's seal record names it (spark_kafka_backup.catalog.seals).
    assert catalog is not None and len(catalog.segments) == 2
    assert catalog.segments[1].name in before_names and catalog.segments[0].name.endswith("_merged_1")
    entry = catalog.segments[0]
    assert (entry.key_id, entry.compression) == (key_id(KEK).hex(), "lz4")
    assert kbackup_in_process("verify", root, "--deep", "--encryption-key-file", key_file).returncode == 0
    stored = (root / "t" / f"{entry.name}_records").read_bytes()
    assert is_framed(stored) and b"value-7-" not in stored
    assert _records(root, KeyRing.of([KEK])) == [sample_record(i) for i in range(RECORDS)]


def test_a_damaged_segment_is_not_merged_and_nothing_changes(mixed: Path) -> None:
    names = _names(mixed)
    victim = mixed / "t" / f"{names[3]}_records"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x40
    victim.write_bytes(bytes(data))
    files = sorted(p.name for p in (mixed / "t").iterdir())
    refused = kbackup_in_process("merge", mixed, "--max-segment-size", "9000")
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and victim.name in lines[0] and "damaged, not merged" in lines[0], refused.stderr
    assert sorted(p.name for p in (mixed / "t").iterdir()) == files
    assert _names(mixed) == names and not as_local(intent_path(mixed)).exists()


@pytest.mark.long
def test_a_merge_killed_at_any_step_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    source = tmp_path / "source"  # one group: every kill point of one merge, for a test that stays short
    _write(source, range(RECORDS // 4))
    _write(source, range(RECORDS // 4, RECORDS // 2), compression="gzip")
    # Merged once already at a smaller size: the killed merge replaces plain and merged segments alike.
    assert kbackup_in_process("merge", source, "--max-segment-size", "4500").returncode == 0
    _write(source, range(RECORDS // 2, RECORDS // 2 + 30), compression="gzip")
    (group,) = plan_merge(source, ["t"], max_segment_size=40000)
    assert {entry.name.endswith("_merged_1") for entry in group.sources} == {True, False}
    before = _records(source)
    for kill_at in range(1, 200):
        root = tmp_path / f"backup-{kill_at}"
        shutil.copytree(source, root)
        killed = subprocess.run(
            [sys.executable, "-m", "tests.crash_merge", str(root), "40000", str(kill_at)],
            capture_output=True, text=True, cwd=REPO, timeout=300,
        )  # fmt: skip
        if killed.returncode == 0:
            break  # the merge finished before the kill point: every step was tried
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert not killed.stdout.strip().endswith("segments")  # "merged N segments" only once it is true
        # Whatever the kill left reads the same records and verifies (an unfinished merge is a note, not damage).
        assert _records(root) == before, f"kill at {kill_at}"
        verified = kbackup_in_process("verify", root)
        assert verified.returncode == 0, f"kill at {kill_at}: {verified.stdout}{verified.stderr}"
        # So does a partition index rebuilt from the files as the kill left them.
        rebuilt = tmp_path / f"rebuilt-{kill_at}"
        shutil.copytree(root, rebuilt)
        rebuild_partition_index(rebuilt / "t", 0)
        assert _records(rebuilt) == before, f"kill at {kill_at}: rebuilt index"
        # A merge run again finishes the job.
        again = kbackup_in_process("merge", root, "--max-segment-size", "40000")
        assert again.returncode == 0, again.stdout + again.stderr
        assert not as_local(intent_path(root)).exists()
        assert _records(root) == before
        assert plan_merge(root, ["t"], max_segment_size=40000) == []
        assert all(report.ok and not report.notes for report in verify_backup(root, ["t"], deep=True)), kill_at
        assert len(list_segment_files(root / "t", 0)) == len(_names(root))
    else:
        raise AssertionError("the merge never finished: raise the kill range")
    assert kill_at > 10


def _interrupted_merge(root: Path, size: int) -> None:
    """A merge killed right after its switch: intent, merged segment and partition index written, nothing after."""
    from spark_kafka_backup.catalog.merge import _sealing_key, _switch, _write_merged

    group = plan_merge(root, ["t"], max_segment_size=size)[0]
    write_intent(root, group.intent())
    _write_merged(root, group, _sealing_key(root / "t", group, NO_KEYS), NO_KEYS)
    _switch(root, group)


def test_prune_and_merge_finish_each_others_interrupted_work_first(mixed: Path) -> None:
    from spark_kafka_backup.catalog.prune import intent_path as prune_intent_path
    from spark_kafka_backup.catalog.prune import plan_prune
    from spark_kafka_backup.storage import write_whole

    before = _records(mixed)
    _interrupted_merge(mixed, 9000)
    assert _records(mixed) == before
    pruned = kbackup_in_process("prune", mixed, "--older-than", "10000d")
    assert pruned.returncode == 0 and "finished an interrupted merge" in pruned.stdout, pruned.stdout + pruned.stderr
    assert not as_local(intent_path(mixed)).exists()
    assert len(list_segment_files(mixed / "t", 0)) == len(_names(mixed))  # the replaced files are gone
    assert all(report.ok and not report.notes for report in verify_backup(mixed, ["t"], deep=True))
    assert _records(mixed) == before

    # A prune killed after writing down its intent: the next merge deletes those segments first, then merges.
    doomed, _ = plan_prune(mixed, ["t"], cutoff_ms=2_000_000_000_000, keep_checkpoints=None)
    doomed = doomed[:2]
    gone = {
        offset for item in doomed for offset in range(item.entry.first_offset or 0, (item.entry.last_offset or 0) + 1)
    }
    intent = {"segments": [[d.topic, d.partition, d.entry.name] for d in doomed], "checkpoints": []}
    write_whole(prune_intent_path(mixed), json.dumps(intent).encode())
    merged = kbackup_in_process("merge", mixed, "--max-segment-size", "30000")
    assert merged.returncode == 0 and "finished an interrupted prune" in merged.stdout, merged.stdout + merged.stderr
    assert _records(mixed) == [r for r in before if r.offset not in gone]
    assert all(report.ok and not report.notes for report in verify_backup(mixed, ["t"], deep=True))
