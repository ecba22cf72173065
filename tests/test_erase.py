"""``spark-kafka-backup erase``: records taken out of a backup for good, on real files.

Kafka's half (a backup of a real topic, ``erase --where`` through Spark, a restore of what is left) is in
tests/test_restore_where.py; the S3 API server's in tests/test_object_storage.py.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from spark_kafka_backup.catalog.erase import intent_path, pending_erase, refuse_unfinished_erase
from spark_kafka_backup.catalog.erasures import erasure_path, read_erasure
from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.seals import pinned_names
from spark_kafka_backup.catalog.store import read_catalog
from spark_kafka_backup.catalog.verify import verify_backup
from spark_kafka_backup.errors import DamagedBackupError
from spark_kafka_backup.format.encryption import KeyRing, key_id
from spark_kafka_backup.format.frames import is_framed
from spark_kafka_backup.format.naming import RECORDS_SUFFIX
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.format.record_columns import EncodedRecords, encode_columns
from spark_kafka_backup.partition.layout import list_segment_files
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.records_file import NO_KEYS, open_records
from spark_kafka_backup.partition.writer import PartitionWriter
from tests.conftest import REPO
from tests.kafka_helpers import kbackup_in_process
from tests.recordgen import sample_record
from tests.unit.test_record_columns import as_columns

RECORDS = 240
SECRET = b"customer-42"
KEK = bytes(range(11, 43))


def _record(i: int) -> Record:
    """Record ``i`` of the partition; every seventh is the customer's, whose key is also in its value and a header."""
    record = sample_record(i)
    if i % 7 == 3:
        return record._replace(key=SECRET, value=b"order of " + SECRET, headers=(("who", SECRET),))
    return record


def _write(root: Path, indexes: range, **options: object) -> None:
    with PartitionWriter(root / "t", "t", 0, max_segment_size=2000, fsync=False, ledger=CatalogLedger(root),
                         **options) as writer:  # type: ignore[arg-type]  # fmt: skip
        for i in indexes:
            writer.append(_record(i))


def _records(root: Path, keys: KeyRing = NO_KEYS) -> list[Record]:
    return list(PartitionReader(root / "t", 0, keys=keys).records())


def _kept(key: bytes = SECRET) -> list[Record]:
    return [record for record in map(_record, range(RECORDS)) if record.key != key]


def traces_of(root: Path, secret: bytes = SECRET) -> list[str]:
    """Every file under ``root`` whose bytes, or whose plain records (a compressed or sealed records file), hold the
    secret."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.name.endswith(RECORDS_SUFFIX) and is_framed(data):
            handle = open_records(path, KeyRing.of([KEK]))
            try:
                data = handle.pread(handle.size, 0)
            finally:
                handle.close()
        if secret in data:
            found.append(str(path.relative_to(root)))
    return found


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    """Partition t/0: plain finished segments, then zstd ones after a reopen, and the newest one still plain (about
    2 KB each), cataloged as a backup leaves them."""
    root = tmp_path / "backup"
    _write(root, range(RECORDS // 2))
    _write(root, range(RECORDS // 2, RECORDS), compression="zstd")
    return root


def test_erase_by_key_leaves_no_trace_of_it_and_every_other_record_as_it_was(mixed: Path) -> None:
    assert _records(mixed) == list(map(_record, range(RECORDS))) and traces_of(mixed)
    files = {p: p.stat().st_mtime_ns for p in (mixed / "t").iterdir()}
    dry = kbackup_in_process("erase", mixed, "--topic", "t", "--key", SECRET.decode(), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    erased = RECORDS - len(_kept())
    assert f"{erased} records would be erased from 1 partition" in dry.stdout
    assert {p: p.stat().st_mtime_ns for p in (mixed / "t").iterdir()} == files  # a dry run changes nothing

    done = kbackup_in_process("erase", mixed, "--topic", "t", "--key", SECRET.decode())
    assert done.returncode == 0, done.stderr
    assert f"erased {erased} records from 1 partition of t" in done.stdout
    # No trace of the key in any file (raw bytes, and the plain bytes of compressed segments); every other record
    # is as it was, at its offset.
    assert traces_of(mixed) == []
    assert _records(mixed) == _kept()
    # The gaps are recorded as erased on purpose: offsets only, nothing of what the records held.
    ranges, records = read_erasure(mixed, "t", 0)
    assert records == erased
    assert ranges.ranges() == [(3 * i, 3 * i) for i in range(RECORDS) if i % 7 == 3]
    assert SECRET not in erasure_path(mixed, "t", 0).read_bytes()  # type: ignore[union-attr]
    # verify is clean and says why the offsets hold nothing; ls counts them apart from transaction offsets.
    (report,) = verify_backup(mixed, ["t"], deep=True)
    assert report.ok, report.errors
    assert any(f"{erased} records erased on purpose" in note for note in report.notes)
    listed = json.loads(kbackup_in_process("ls", mixed, "--json").stdout)[0]["partitions"][0]
    assert listed["erasedRecords"] == erased and listed["missingOffsets"] == 0
    # Offsets 0..3 * (RECORDS - 1) hold the records that were there; the rest (two in three) were transaction offsets.
    assert listed["transactionOffsets"] == 3 * (RECORDS - 1) + 1 - RECORDS
    catalog = read_catalog(mixed, "t", 0)
    assert catalog is not None and catalog.tail is not None
    assert catalog.tail.name == PartitionReader(mixed / "t", 0).segments[-1].name.rsplit("_merged", 1)[0] + "_merged_1"
    assert len(list_segment_files(mixed / "t", 0)) == len(PartitionReader(mixed / "t", 0).segments)
    assert not intent_path(mixed).exists()  # type: ignore[union-attr]

    again = kbackup_in_process("erase", mixed, "--topic", "t", "--key", SECRET.decode())
    assert again.returncode == 0 and "erased 0 records" in again.stdout, again.stdout + again.stderr


def test_a_backup_that_reads_the_erased_records_again_does_not_store_them(mixed: Path) -> None:
    assert kbackup_in_process("erase", mixed, "--topic", "t", "--key", SECRET.decode()).returncode == 0
    # The source still holds them: a replayed batch (columns) and single records, below and at the end.
    originals = list(map(_record, range(RECORDS)))
    with PartitionWriter(mixed / "t", "t", 0, max_segment_size=2000, fsync=False,
                         ledger=CatalogLedger(mixed)) as writer:  # fmt: skip
        written, skipped = writer.append_batch(_encoded(originals[RECORDS // 2 :]))
        assert (written, skipped) == (0, RECORDS // 2)
        assert not any(writer.append(record) for record in originals[: RECORDS // 2])
        for i in range(RECORDS, RECORDS + 20):
            writer.append(_record(i))
    assert _records(mixed) == _kept() + list(map(_record, range(RECORDS, RECORDS + 20)))
    (report,) = verify_backup(mixed, ["t"], deep=True)
    assert report.ok, report.errors


def _encoded(records: list[Record]) -> EncodedRecords:
    return encode_columns(**as_columns(records))


def test_encrypted_segments_are_erased_with_their_key_and_stay_sealed(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    _write(root, range(RECORDS), compression="lz4", encryption_key=KEK)
    names = [segment.name for segment in PartitionReader(root / "t", 0).segments]
    refused = kbackup_in_process("erase", root, "--topic", "t", "--key", SECRET.decode())
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert [segment.name for segment in PartitionReader(root / "t", 0).segments] == names
    assert not intent_path(root).exists()  # type: ignore[union-attr]

    key_file = tmp_path / "kek.hex"
    key_file.write_text(KEK.hex())
    done = kbackup_in_process("erase", root, "--topic", "t", "--key", SECRET.decode(), "--encryption-key-file",
                              key_file)  # fmt: skip
    assert done.returncode == 0, done.stderr
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None
    rewritten = [entry for entry in catalog.segments if entry.name.endswith("_merged_1")]
    assert rewritten and all((e.key_id, e.compression) == (key_id(KEK).hex(), "lz4") for e in rewritten)
    # The seal record names the rewritten newest sealed segment: a reader with the key accepts the partition.
    assert pinned_names(root, "t", 0, plain=False) <= {
        segment.name for segment in PartitionReader(root / "t", 0).segments
    }
    verified = kbackup_in_process("verify", root, "--deep", "--encryption-key-file", key_file)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert _records(root, KeyRing.of([KEK])) == _kept()
    assert traces_of(root) == []


def test_records_a_killed_writer_left_past_its_committed_prefix_are_erased_too(mixed: Path) -> None:
    """A writer killed after it synced records and before it recorded them in the catalog: a backup reopening the
    partition keeps them, so the erase looks at them and erases the customer's among them."""
    more = range(RECORDS, RECORDS + 30)
    writer = PartitionWriter(mixed / "t", "t", 0, max_segment_size=20000, fsync=False, ledger=CatalogLedger(mixed))
    for i in more:
        writer.append(_record(i))
    writer.sync()
    writer.abandon()  # as killed: the catalog's committed prefix of the newest segment does not cover them
    expected = _kept() + [record for record in map(_record, more) if record.key != SECRET]
    done = kbackup_in_process("erase", mixed, "--topic", "t", "--key", SECRET.decode())
    assert done.returncode == 0, done.stderr
    assert _records(mixed) == expected and traces_of(mixed) == []
    assert read_erasure(mixed, "t", 0)[1] == RECORDS + len(more) - len(expected)
    # The backup replays the batch the killed writer held: nothing comes back.
    with PartitionWriter(mixed / "t", "t", 0, max_segment_size=20000, fsync=False,
                         ledger=CatalogLedger(mixed)) as writer:  # fmt: skip
        assert not any(writer.append(_record(i)) for i in more)
    assert _records(mixed) == expected and traces_of(mixed) == []
    (report,) = verify_backup(mixed, ["t"], deep=True)
    assert report.ok, report.errors


class _KilledBeforeCataloging(CatalogLedger):
    """The catalog of a writer killed between sealing its newest segment and telling the catalog."""

    def newest_sealed(self, topic_dir: Path, partition: int, keys: KeyRing, *, read_from: int | None = None) -> None:
        pass


def test_a_sealed_newest_segment_the_catalog_does_not_name_yet_stays_sealed(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    _write(root, range(RECORDS // 2), compression="lz4", encryption_key=KEK)
    with PartitionWriter(root / "t", "t", 0, max_segment_size=2000, fsync=False, ledger=_KilledBeforeCataloging(root),
                         compression="lz4", encryption_key=KEK) as writer:  # fmt: skip
        for i in range(RECORDS // 2, RECORDS):
            writer.append(_record(i))
        writer.seal_newest()
    newest = PartitionReader(root / "t", 0).segments[-1].name
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None and newest not in {entry.name for entry in catalog.segments}
    key_file = tmp_path / "kek.hex"
    key_file.write_text(KEK.hex())
    done = kbackup_in_process("erase", root, "--topic", "t", "--key", SECRET.decode(), "--encryption-key-file",
                              key_file)  # fmt: skip
    assert done.returncode == 0, done.stderr
    for segment in PartitionReader(root / "t", 0).segments:  # every one with records sealed, the newest included
        data = (root / "t" / f"{segment.name}_records").read_bytes()
        assert len(data) <= 1 or is_framed(data), segment.name
    assert _records(root, KeyRing.of([KEK])) == _kept() and traces_of(root) == []


def test_segment_files_the_partition_index_does_not_name_refuse_the_erase(mixed: Path) -> None:
    first = PartitionReader(mixed / "t", 0).segments[0].name
    for suffix in ("_records", "_index"):  # a publish killed before its index, or an entry lost
        shutil.copy(
            mixed / "t" / f"{first}{suffix}", mixed / "t" / f"segment_partition_000_from_offset_0000099999{suffix}"
        )
    refused = kbackup_in_process("erase", mixed, "--topic", "t", "--key", SECRET.decode())
    assert refused.returncode == 1 and "from_offset_0000099999: holds records" in refused.stderr, refused.stderr
    assert not erasure_path(mixed, "t", 0).exists()  # type: ignore[union-attr]


def test_a_damaged_segment_refuses_the_erase_and_nothing_changes(mixed: Path) -> None:
    names = [segment.name for segment in PartitionReader(mixed / "t", 0).segments]
    victim = mixed / "t" / f"{names[5]}_records"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x40
    victim.write_bytes(bytes(data))
    files = sorted(p.name for p in (mixed / "t").iterdir())
    refused = kbackup_in_process("erase", mixed, "--topic", "t", "--key", SECRET.decode())
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and names[5] in lines[0] and "nothing was erased" in lines[0], refused.stderr
    assert sorted(p.name for p in (mixed / "t").iterdir()) == files
    assert not erasure_path(mixed, "t", 0).exists()  # type: ignore[union-attr]


def test_bad_options_are_one_line(mixed: Path) -> None:
    for args, expected in (
        (("--key-hex", "zz"), "--key-hex"),
        (("--key", "k", "--partition", "7"), "no partition 7"),
        (("--finish", "--dry-run"), "--finish"),
    ):
        refused = kbackup_in_process("erase", mixed, "--topic", "t", *args)
        assert refused.returncode == 1, args
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], (args, refused.stderr)
    missing = kbackup_in_process("erase", mixed, "--topic", "nope", "--key", "k")
    assert missing.returncode == 1 and "'nope'" in missing.stderr


#: Kill points tried in the quick tier, for an erase from one segment (its file operations, about 35: the lease, the
#: intent, the replacement, the switch, the erasure record, the catalog, the deletions); the long tier tries every
#: one of an erase from many segments, the newest one included.
QUICK_KILLS = (8, 20, 30)


def test_an_erase_killed_is_finished_or_rolled_back_exactly(tmp_path: Path, mixed: Path) -> None:
    finishes = [_killed_erase_then_again(tmp_path, mixed, kill_at, key=b"key-102") for kill_at in QUICK_KILLS]
    assert {"rolled back", "finished"} <= set(finishes), finishes


@pytest.mark.long
def test_an_erase_killed_at_any_step_erases_exactly_once_rerun(tmp_path: Path, mixed: Path) -> None:
    finishes = set()
    for kill_at in range(1, 400):
        finished = _killed_erase_then_again(tmp_path, mixed, kill_at)
        if finished is None:
            break
        finishes.add(finished)
    else:
        raise AssertionError("the erase never finished: raise the kill range")
    assert kill_at > 20
    # Kills before the switch were rolled back, kills after it finished forwards, and kills before the intent or
    # after it was removed left nothing to finish.
    assert finishes == {"rolled back", "finished", "nothing"}, finishes


def _killed_erase_then_again(tmp_path: Path, source: Path, kill_at: int, *, key: bytes = SECRET) -> str | None:
    """Kill an erase at its ``kill_at``-th file operation; check what the kill left, then finish and erase again.
    What finishing it did (``None``: the erase ended before the kill point)."""
    root = tmp_path / f"backup-{kill_at}"
    shutil.copytree(source, root)
    killed = subprocess.run(
        [sys.executable, "-m", "tests.crash_erase", str(root), key.decode(), str(kill_at)],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    if killed.returncode == 0:
        return None
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    # What the kill left: every record there is an original one, at most the customer's are missing, and a
    # restore refuses while the erase is unfinished.
    left = _records(root)
    assert set(left) <= set(map(_record, range(RECORDS))) and set(_kept(key)) <= set(left), kill_at
    if pending_erase(root) is not None:
        with pytest.raises(DamagedBackupError, match="--finish"):
            refuse_unfinished_erase(root, ["t"])
        dry = kbackup_in_process("erase", root, "--topic", "t", "--key", key.decode(), "--dry-run")
        assert dry.returncode == 1 and "--finish" in dry.stderr, dry.stderr
        (report,) = verify_backup(root, ["t"])
        assert any("--finish" in error for error in report.errors), report
    finished = kbackup_in_process("erase", root, "--finish")
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert pending_erase(root) is None
    (report,) = verify_backup(root, ["t"], deep=True)
    assert report.ok and not any("unfinished" in note for note in report.notes), (kill_at, report)
    again = kbackup_in_process("erase", root, "--topic", "t", "--key", key.decode())
    assert again.returncode == 0, again.stdout + again.stderr
    assert _records(root) == _kept(key), kill_at
    assert traces_of(root, key) == [], kill_at
    assert read_erasure(root, "t", 0)[1] == RECORDS - len(_kept(key)), kill_at
    (report,) = verify_backup(root, ["t"], deep=True)
    assert report.ok and len(list_segment_files(root / "t", 0)) == len(PartitionReader(root / "t", 0).segments)
    shutil.rmtree(root)
    said = finished.stdout
    return (
        "rolled back" if "rolled back" in said else "finished" if "finished an interrupted erase" in said else "nothing"
    )
