"""The catalog of a backup and `spark-kafka-backup verify`: damage is found and named."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

import crc32c
import pytest

from spark_kafka_backup.catalog.build import rebuild_catalog
from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.store import catalog_path, read_catalog
from spark_kafka_backup.catalog.verify import verify_backup
from spark_kafka_backup.errors import DamagedBackupError
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.storage import as_local
from tests.backup_builders import write_original_style
from tests.kafka_helpers import run_kbackup
from tests.recordgen import sample_record


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Topic 't', partitions 0 and 1, small segments (several finished ones each), with a catalog."""
    root = tmp_path / "backup"
    for partition in (0, 1):
        with PartitionWriter(root / "t", "t", partition, max_segment_size=1000, fsync=False) as writer:
            for i in range(40):
                writer.append(sample_record(i))
    rebuild_catalog(root, ["t"])
    return root


def _segment(root: Path, partition: int, number: int) -> str:
    catalog = read_catalog(root, "t", partition)
    assert catalog is not None
    return catalog.segments[number].name


def test_catalog_describes_every_finished_segment(root: Path) -> None:
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None
    assert catalog_path(root, "t", 0) == root / "kbackup~state" / "catalog" / "t" / "partition_000.json"
    segments = sorted((root / "t").glob("segment_partition_000_*_records"))
    assert len(catalog.segments) == len(segments) - 1 >= 3  # all but the growing last one
    assert sum(entry.records for entry in catalog.segments) < 40
    for entry in catalog.segments:
        data = (root / "t" / f"{entry.name}_records").read_bytes()
        assert entry.records_bytes == len(data)
        assert entry.records_crc32c == crc32c.crc32c(data)
        assert entry.index_crc32c == crc32c.crc32c((root / "t" / f"{entry.name}_index").read_bytes())
    first = catalog.segments[0]
    assert (first.first_offset, first.start_offset) == (0, 0)
    stamped = [t for i in range(first.records) if (t := sample_record(i).timestamp) is not None]
    assert (first.min_timestamp, first.max_timestamp) == (min(stamped), max(stamped))
    spans = [(e.first_offset or 0, e.last_offset or 0) for e in catalog.segments]
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))


def test_an_intact_backup_verifies(root: Path) -> None:
    reports = verify_backup(root, ["t"], deep=True)
    assert [(r.partition, r.ok, r.records) for r in reports] == [(0, True, 40), (1, True, 40)]
    result = run_kbackup("verify", root, "--deep")
    assert result.returncode == 0
    assert "t/0: ok" in result.stdout


def _flip_a_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[40] ^= 0x04
    path.write_bytes(bytes(data))


def test_flipped_bit_is_named(root: Path) -> None:
    name = _segment(root, 0, 1)
    _flip_a_bit(root / "t" / f"{name}_records")
    result = run_kbackup("verify", root)
    assert result.returncode == 1
    assert "t/0: DAMAGED" in result.stdout
    assert f"error: {name}_records: checksum mismatch: CRC32C" in result.stdout
    assert "t/1: ok" in result.stdout
    # Progress lines first (not a terminal), then the one error line.
    assert result.stderr.splitlines() == [
        "verify: 1/2 partitions (t/0)",
        "verify: 2/2 partitions (t/1)",
        "spark-kafka-backup: error: 1 of 2 partitions failed verification",
    ]


def test_an_older_kbackups_state_directory_is_still_read(root: Path) -> None:
    """A backup whose state is in ``.kbackup`` (spark-kafka-backup before the rename) keeps its catalog: damage is still
    found."""
    name = _segment(root, 0, 1)
    (root / "kbackup~state").rename(root / ".kbackup")
    assert run_kbackup("verify", root).returncode == 0
    listed = run_kbackup("ls", root)
    assert listed.returncode == 0 and ".kbackup" not in listed.stdout  # the state directory is not a topic
    _flip_a_bit(root / "t" / f"{name}_records")
    result = run_kbackup("verify", root)
    assert result.returncode == 1
    assert f"error: {name}_records: checksum mismatch: CRC32C" in result.stdout
    assert not (root / "kbackup~state").exists()  # nothing moved to the new name


def test_truncated_file_is_named(root: Path) -> None:
    name = _segment(root, 1, 0)
    path = root / "t" / f"{name}_records"
    path.write_bytes(path.read_bytes()[:-10])
    result = run_kbackup("verify", root)
    assert result.returncode == 1
    assert f"error: {name}_records: truncated:" in result.stdout
    assert f"error: {name}_records: {path.stat().st_size} bytes, the catalog says" in result.stdout


def test_missing_segment_is_named(root: Path) -> None:
    name = _segment(root, 0, 2)
    (root / "t" / f"{name}_records").unlink()
    (root / "t" / f"{name}_index").unlink()
    result = run_kbackup("verify", root)
    assert result.returncode == 1
    assert f"error: missing segment file(s): {name}_records, {name}_index" in result.stdout


def test_extra_segment_is_named(root: Path) -> None:
    extra = "segment_partition_001_from_offset_0000099999"
    shutil.copyfile(root / "t" / f"{_segment(root, 1, 0)}_records", root / "t" / f"{extra}_records")
    result = run_kbackup("verify", root)
    assert result.returncode == 1
    assert f"error: extra segment {extra}: not in the partition index" in result.stdout


def test_deep_verify_finds_what_checksums_cannot_without_a_catalog(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    with PartitionWriter(root / "t", "t", 0, fsync=False) as writer:
        for i in range(5):
            writer.append(sample_record(i))
    path = next((root / "t").glob("*_records"))
    data = bytearray(path.read_bytes())
    data[9:12] = b"\x00\x00\x07"  # record 0's timestamp type becomes 7
    path.write_bytes(bytes(data))
    assert run_kbackup("verify", root).returncode == 0  # no catalog: only structure is checked
    result = run_kbackup("verify", root, "--deep")
    assert result.returncode == 1
    assert "unknown timestamp type" in result.stdout


def test_original_tool_backup_verifies_after_a_catalog_rebuild(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    first = [
        Record(1000 + i, -2 if i % 2 else 0, None if i % 2 else 1_700_000_000_000 + i, b"k", b"v") for i in range(4)
    ]
    second = [Record(2000 + i, 0, 1_700_000_000_100 + i, None, b"w") for i in range(3)]
    write_original_style(root / "legacy", 0, [first, second])
    result = run_kbackup("verify", root)
    assert result.returncode == 0
    assert "note: no catalog" in result.stdout and "spark-kafka-backup catalog rebuild" in result.stdout
    rebuilt = run_kbackup("catalog", "rebuild", root)
    assert rebuilt.stdout == "legacy/0: 1 finished segment, 4 records\n"
    result = run_kbackup("verify", root, "--deep")
    assert result.returncode == 0
    assert "note" not in result.stdout
    catalog = read_catalog(root, "legacy", 0)
    assert catalog is not None
    entry = catalog.segments[0]
    assert (entry.start_offset, entry.first_offset, entry.last_offset) == (0, 1000, 1003)
    assert (entry.min_timestamp, entry.max_timestamp) == (1_700_000_000_000, 1_700_000_000_002)


def test_segment_finished_after_the_catalog_is_a_note_not_damage(root: Path) -> None:
    with PartitionWriter(root / "t", "t", 0, max_segment_size=1000, fsync=False) as writer:
        for i in range(40, 60):
            writer.append(sample_record(i))
    result = run_kbackup("verify", root)
    assert result.returncode == 0
    assert re.search(r"\d+ finished segments? not in the catalog yet", result.stdout)


def test_the_writer_catalogs_each_segment_it_finishes_and_catches_up(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    with PartitionWriter(root / "t", "t", 0, max_segment_size=1000, fsync=False, ledger=CatalogLedger(root)) as writer:
        for i in range(10):
            writer.append(sample_record(i))
    older = as_local(catalog_path(root, "t", 0)).read_bytes()
    with PartitionWriter(root / "t", "t", 0, max_segment_size=1000, fsync=False, ledger=CatalogLedger(root)) as writer:
        for i in range(10, 30):
            writer.append(sample_record(i))
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None
    segments = sorted((root / "t").glob("*_records"), key=lambda p: int(p.name.split("_")[5]))
    assert [e.name for e in catalog.segments] == [p.name[: -len("_records")] for p in segments[:-1]]
    assert catalog.segments == read_catalog_rebuilt(tmp_path, root)
    # A crash between starting a segment and updating the catalog loses the update (the catalog is replaced whole:
    # the older one stays); the next roll catches up.
    as_local(catalog_path(root, "t", 0)).write_bytes(older)
    assert len(read_catalog(root, "t", 0).segments) < len(catalog.segments)  # type: ignore[union-attr]
    with PartitionWriter(root / "t", "t", 0, max_segment_size=1000, fsync=False, ledger=CatalogLedger(root)) as writer:
        for i in range(30, 45):
            writer.append(sample_record(i))
    caught_up = read_catalog(root, "t", 0)
    assert caught_up is not None
    assert len(caught_up.segments) == len(list((root / "t").glob("*_records"))) - 1
    assert run_kbackup("verify", root, "--deep").returncode == 0


# -- a lost catalog ---------------------------------------------------------------------------------


@pytest.mark.parametrize("lost", ["catalog file", "catalog directory"])
def test_a_lost_catalog_is_damage_not_an_unchecked_backup(tmp_path: Path, lost: str) -> None:
    """A partition of one segment whose catalog goes, and then a byte of a value: verify and cat refuse, naming the
    catalog; catalog rebuild (the operator vouching for the files) makes it a checked backup again."""
    root = tmp_path / "backup"
    with PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root)) as writer:
        for i in range(10):
            writer.append(sample_record(i))
    assert run_kbackup("verify", root).returncode == 0
    path = as_local(catalog_path(root, "t", 0))
    if lost == "catalog file":
        path.unlink()
    else:
        shutil.rmtree(path.parent)
    segment = next((root / "t").glob("*_records"))
    data = bytearray(segment.read_bytes())
    data[bytes(data).index(b"value-")] ^= 0x20  # still decodes: only a checksum shows it
    segment.write_bytes(bytes(data))
    result = run_kbackup("verify", root)
    assert result.returncode == 1, result.stdout
    assert "t/0: DAMAGED" in result.stdout
    assert f"its catalog {path} is missing, though spark-kafka-backup kept one for it" in result.stdout
    refused, printed = _cat(root, "--topic", "t")
    assert refused.returncode == 1 and printed == []
    assert f"its catalog {path} is missing" in refused.stderr and "Traceback" not in refused.stderr
    listed = run_kbackup("ls", root)
    assert listed.returncode == 0 and "DAMAGED: its catalog is lost" in listed.stdout, listed.stdout
    assert json.loads(run_kbackup("ls", root, "--json").stdout)[0]["partitions"][0]["catalogLost"] is True
    described = run_kbackup("describe", root)
    assert described.returncode == 0 and "DAMAGED: its catalog is lost" in described.stdout, described.stdout
    summary = json.loads(run_kbackup("describe", root, "--json").stdout)["topics"][0]["partitions"][0]
    assert (summary["catalogLost"], summary["cataloged"]) == (True, False)
    page = tmp_path / "report.html"
    assert run_kbackup("report", root, "--output", page).returncode == 0
    assert "DAMAGED: its catalog is lost" in page.read_text()
    assert f"spark-kafka-backup catalog rebuild {root} --topic t" in refused.stderr
    # The backup's writer does not go on and describe the files anew as they are now.
    with pytest.raises(DamagedBackupError, match=r"its catalog .* is missing"):
        PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root))
    assert not path.exists()
    rebuilt = run_kbackup("catalog", "rebuild", root, "--topic", "t")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert run_kbackup("verify", root).returncode == 0  # what the operator vouched for is the reference now
    assert (
        json.loads(run_kbackup("describe", root, "--json").stdout)["topics"][0]["partitions"][0]["catalogLost"] is False
    )


def test_a_partition_never_cataloged_is_read_as_the_originals(tmp_path: Path) -> None:
    """A backup copied without its state directory has no marker: structure only, as before (and ls says nothing of
    damage)."""
    root = tmp_path / "backup"
    with PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root)) as writer:
        for i in range(10):
            writer.append(sample_record(i))
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    shutil.rmtree(copy / "kbackup~state")
    assert run_kbackup("verify", copy).returncode == 0
    assert "DAMAGED" not in run_kbackup("ls", copy).stdout
    assert "DAMAGED" not in run_kbackup("describe", copy).stdout
    result, printed = _cat(copy, "--topic", "t")
    assert result.returncode == 0 and printed == _expected(0, range(10))


def read_catalog_rebuilt(tmp_path: Path, root: Path) -> tuple[object, ...]:
    """The catalog an independent rebuild writes for the same files."""
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    shutil.rmtree(copy / "kbackup~state")
    rebuild_catalog(copy, ["t"])
    rebuilt = read_catalog(copy, "t", 0)
    assert rebuilt is not None
    return rebuilt.segments


# -- the set of segments, and what cat reads ------------------------------------------------


def _cat(*args: str | Path) -> tuple[subprocess.CompletedProcess[str], list[dict[str, object]]]:
    import json

    result = run_kbackup("cat", *args)
    return result, [json.loads(line) for line in result.stdout.splitlines()]


def _expected(partition: int, numbers: Iterable[int]) -> list[dict[str, object]]:
    from spark_kafka_backup.cli import record_to_json

    return [record_to_json("t", partition, sample_record(i)) for i in numbers]


def _numbers_in(root: Path, partition: int, name: str) -> list[int]:
    """Which sample records (by number) a segment holds, from its files."""
    from spark_kafka_backup.partition.segment_reader import iter_segment

    records = iter_segment(root / "t" / f"{name}_records", root / "t" / f"{name}_index")
    return [record.offset // 3 for record in records]


def test_a_partition_index_cut_short_hides_no_records(root: Path) -> None:
    """The partition index loses 30 bytes (a partial last entry): its last segment must not vanish silently."""
    index = root / "t" / "index_partition_000"
    index.write_bytes(index.read_bytes()[:-30])
    segments = sorted((root / "t").glob("segment_partition_000_*_records"), key=lambda p: int(p.name.split("_")[5]))
    hidden = segments[-1].name[: -len("_records")]
    hidden_numbers = _numbers_in(root, 0, hidden)
    assert hidden_numbers  # the hidden segment holds records

    result = run_kbackup("verify", root)
    assert result.returncode == 1
    assert f"error: extra segment {hidden}: not in the partition index" in result.stdout

    refused, printed = _cat(root, "--topic", "t")
    assert refused.returncode == 1 and printed == []
    assert refused.stderr.strip() == (
        f"spark-kafka-backup: error: the backup is damaged: topic 't' partition 0: segment {hidden} "
        f"(offsets {3 * hidden_numbers[0]}..{3 * hidden_numbers[-1]}): its files hold "
        f"{segments[-1].stat().st_size} bytes of records but the partition index does not name it "
        f"(spark-kafka-backup index rebuild {root / 't'} --partition 0 adds it back) "
        "(--skip-bad-segments prints the rest, --no-verify prints what the files hold)"
    )
    skipped, printed = _cat(root, "--topic", "t", "--skip-bad-segments")
    assert skipped.returncode == 0
    assert f"left out: topic 't' partition 0: segment {hidden}" in skipped.stderr
    kept = [i for i in range(40) if i not in hidden_numbers]
    assert printed == _expected(0, kept) + _expected(1, range(40))

    # The repair the message names brings every record back.
    assert run_kbackup("index", "rebuild", root / "t", "--partition", "0").returncode == 0
    result, printed = _cat(root, "--topic", "t", "--partition", "0")
    assert result.returncode == 0, result.stderr
    assert printed == _expected(0, range(40))


def test_a_cataloged_segment_missing_from_the_partition_index_is_damage(root: Path) -> None:
    from spark_kafka_backup.format.magic import MAGIC_V1
    from spark_kafka_backup.format.partition_index import encode_entry
    from spark_kafka_backup.partition.reader import PartitionReader

    lost = _segment(root, 1, 1)
    lost_numbers = _numbers_in(root, 1, lost)
    segments = [s for s in PartitionReader(root / "t", 1).segments if s.name != lost]
    (root / "t" / "index_partition_001").write_bytes(MAGIC_V1 + b"".join(encode_entry(s) for s in segments))
    for suffix in ("_records", "_index"):
        (root / "t" / f"{lost}{suffix}").unlink()

    result = run_kbackup("verify", root)
    assert result.returncode == 1
    assert f"error: missing segment {lost}: named in the catalog, not in the partition index" in result.stdout
    refused, printed = _cat(root, "--partition", "1", "--topic", "t")
    assert refused.returncode == 1 and printed == []
    assert f"segment {lost} (offsets {3 * lost_numbers[0]}..{3 * lost_numbers[-1]})" in refused.stderr
    assert "the catalog names it" in refused.stderr
    skipped, printed = _cat(root, "--topic", "t", "--partition", "1", "--skip-bad-segments")
    assert skipped.returncode == 0
    assert printed == _expected(1, [i for i in range(40) if i not in lost_numbers])


def test_cat_checks_checksums_unless_told_not_to(root: Path) -> None:
    name = _segment(root, 0, 1)
    numbers = _numbers_in(root, 0, name)
    path = root / "t" / f"{name}_records"
    data = bytearray(path.read_bytes())
    flipped = bytes(data).index(b"value-")
    data[flipped] ^= 0x20  # "value-" becomes "Value-" in one record's value: it still decodes
    path.write_bytes(bytes(data))
    refused, printed = _cat(root, "--topic", "t", "--partition", "0")
    assert refused.returncode == 1 and printed == []
    assert f"segment {name} (offsets {3 * numbers[0]}..{3 * numbers[-1]}): {name}_records has CRC32C" in refused.stderr
    # A range that does not reach the damaged segment is printed.
    before, printed = _cat(root, "--topic", "t", "--partition", "0", "--to-offset", str(3 * numbers[0] - 1))
    assert before.returncode == 0 and printed == _expected(0, range(numbers[0]))
    unchecked, printed = _cat(root, "--topic", "t", "--partition", "0", "--no-verify")
    assert unchecked.returncode == 0
    assert [p["offset"] for p in printed] == [3 * i for i in range(40)]
    differing = [i for i in range(40) if printed[i] != _expected(0, [i])[0]]
    assert len(differing) == 1 and differing[0] in numbers  # the flipped byte, as stored


def test_garbage_consumer_offsets_file_fails_verify(root: Path) -> None:
    path = root / "t" / "consumer_offsets_partition_001"
    path.write_bytes(b'{"readers": 12, "broken": ')
    result = run_kbackup("verify", root)
    assert result.returncode == 1
    assert "t/1: DAMAGED" in result.stdout and "t/0: ok" in result.stdout
    assert f"error: {path} at byte 26: consumer offsets file is not valid JSON" in result.stdout


def test_an_empty_unindexed_segment_is_a_note(root: Path) -> None:
    from spark_kafka_backup.format.magic import MAGIC_V1

    fresh = "segment_partition_000_from_offset_0000099999"
    for suffix in ("_records", "_index"):
        (root / "t" / f"{fresh}{suffix}").write_bytes(MAGIC_V1)
    result = run_kbackup("verify", root)
    assert result.returncode == 0, result.stdout
    assert f"note: empty segment {fresh} is not in the partition index yet" in result.stdout
    assert run_kbackup("cat", root, "--topic", "t", "--partition", "0").returncode == 0


# -- the newest segment's committed prefix ----------------------------------------------------


def _open_tail_backup(root: Path, count: int) -> None:
    """One partition in one (1 GiB, never finished) segment, written as the backup's sink writes it."""
    with PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root)) as writer:
        for i in range(count):
            writer.append(sample_record(i))


def test_the_open_segment_is_under_a_checksum(tmp_path: Path) -> None:
    from spark_kafka_backup.catalog.tail import prefix_crc32c

    root = tmp_path / "backup"
    _open_tail_backup(root, 30)
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None and catalog.segments == () and catalog.tail is not None
    records = next((root / "t").glob("*_records"))
    tail = catalog.tail
    assert (tail.first_offset, tail.last_offset, tail.records) == (0, 87, 30)
    assert (tail.records_bytes, tail.records_crc32c) == (records.stat().st_size, crc32c.crc32c(records.read_bytes()))
    # A second batch extends the recorded prefix without reading the first one again: the same checksum as a fresh read.
    with PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root)) as writer:
        for i in range(30, 45):
            writer.append(sample_record(i))
    extended = read_catalog(root, "t", 0)
    assert extended is not None and extended.tail is not None
    assert extended.tail.records == 45
    assert extended.tail.records_crc32c == prefix_crc32c(records, records.stat().st_size)[0]
    assert extended.tail.index_crc32c == crc32c.crc32c(next((root / "t").glob("*_index")).read_bytes())
    assert run_kbackup("verify", root, "--deep").returncode == 0

    data = bytearray(records.read_bytes())
    flipped = bytes(data).index(b"value-40-")
    data[flipped] ^= 0x20  # a value byte: the record still decodes, so only the checksum can tell
    records.write_bytes(bytes(data))
    for deep in ((), ("--deep",)):
        result = run_kbackup("verify", root, *deep)
        assert result.returncode == 1
        assert f"error: {records.name}: its first {len(data)} bytes (committed) have CRC32C" in result.stdout
    refused, printed = _cat(root, "--topic", "t")
    assert refused.returncode == 1 and printed == []
    assert f"segment {records.name[: -len('_records')]} (offsets 0..132)" in refused.stderr


def test_a_crash_before_the_catalog_update_is_caught_up_by_the_next_writer(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    _open_tail_backup(root, 10)
    writer = PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root))
    for i in range(10, 25):
        writer.append(sample_record(i))
    writer.sync()  # synced, then killed before close() records the tail
    writer.abandon()
    behind = read_catalog(root, "t", 0)
    assert behind is not None and behind.tail is not None and behind.tail.records == 10
    assert run_kbackup("verify", root).returncode == 0  # the recorded prefix still checks out
    with PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root)) as writer:
        writer.append(sample_record(25))
    caught_up = read_catalog(root, "t", 0)
    assert caught_up is not None and caught_up.tail is not None
    records = next((root / "t").glob("*_records"))
    assert (caught_up.tail.records, caught_up.tail.records_crc32c) == (26, crc32c.crc32c(records.read_bytes()))


def test_committed_records_cut_off_are_refused_by_the_next_writer(tmp_path: Path) -> None:
    from spark_kafka_backup.errors import FormatError

    root = tmp_path / "backup"
    _open_tail_backup(root, 20)
    records = next((root / "t").glob("*_records"))
    records.write_bytes(records.read_bytes()[:-150])
    result = run_kbackup("verify", root)
    assert result.returncode == 1
    assert "bytes, the catalog says" in result.stdout and "were committed" in result.stdout
    with pytest.raises(FormatError, match=r"committed records are lost"):
        PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root))


def test_a_catalog_rebuild_records_the_tail(root: Path) -> None:
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None and catalog.tail is not None
    segments = sorted((root / "t").glob("segment_partition_000_*_records"), key=lambda p: int(p.name.split("_")[5]))
    assert catalog.tail.name == segments[-1].name[: -len("_records")]
    assert catalog.tail.records_crc32c == crc32c.crc32c(segments[-1].read_bytes())


def test_no_catalog_note_when_there_is_nothing_to_catalog(tmp_path: Path) -> None:
    """A partition holding only its open newest segment (a fresh backup) has nothing a rebuild would record."""
    root = tmp_path / "backup"
    write_original_style(root / "fresh", 0, [[Record(i, 0, 1_700_000_000_000 + i, b"k", b"v") for i in range(3)]])
    result = run_kbackup("verify", root)
    assert result.returncode == 0 and result.stdout == "fresh/0: ok (1 segment, 3 records)\n"
    assert run_kbackup("catalog", "rebuild", root).stdout == "fresh/0: 0 finished segments, 0 records\n"


def test_a_segment_a_running_backup_names_after_the_read_is_not_lost(tmp_path: Path) -> None:
    """A reader's partition index predates a segment the backup started since (named, then filled): not lost."""
    from spark_kafka_backup.catalog.segment_set import lost_segments
    from spark_kafka_backup.partition.reader import PartitionReader

    ledger = CatalogLedger(tmp_path)
    with PartitionWriter(tmp_path / "t", "t", 0, max_segment_size=300, fsync=False, ledger=ledger) as writer:
        for offset in range(5):
            writer.append(Record(offset, 0, 1_700_000_000_000, b"k", b"v" * 50))
    before = PartitionReader(tmp_path / "t", 0)
    with PartitionWriter(tmp_path / "t", "t", 0, max_segment_size=300, fsync=False, ledger=ledger) as writer:
        for offset in range(5, 40):
            writer.append(Record(offset, 0, 1_700_000_000_000, b"k", b"v" * 50))
    assert len(PartitionReader(tmp_path / "t", 0).segments) > len(before.segments)
    assert lost_segments(tmp_path, "t", 0, before) == []
    # A segment really missing from the partition index is still found.
    (tmp_path / "t" / "index_partition_000").write_bytes(b"\x01")
    assert [bad.name for bad in lost_segments(tmp_path, "t", 0, before)]
