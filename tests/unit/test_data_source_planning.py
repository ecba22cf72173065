"""The ``kbackup`` data source without Spark running: its options, its errors' words, the rows built from a segment's
columns, and the plan over a backup's catalog."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings

from spark_kafka_backup.catalog.ledger import CatalogLedger
from spark_kafka_backup.catalog.store import read_catalog
from spark_kafka_backup.datasource.kafka_rows import KAFKA_ROWS_SCHEMA, kafka_rows
from spark_kafka_backup.datasource.scan_options import scan_options
from spark_kafka_backup.datasource.scan_plan import plan_scans
from spark_kafka_backup.datasource.segment_scan import read_scan
from spark_kafka_backup.errors import (
    BackupNotFoundError,
    DamagedBackupError,
    FormatError,
    InvalidRecordError,
    UsageError,
)
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.writer import PartitionWriter
from tests.recordgen import sample_record
from tests.strategies import record_runs


def test_options_are_typed_and_a_wrong_one_is_one_error_naming_it() -> None:
    options = scan_options({"path": "/b", "topics": "a, b", "partitions": "0,2", "fromoffset": "5", "verify": "FALSE",
                            "totimestamp": "2026-11-22T08:00:00Z", "encryptionkeyfile": "/k1,/k2"})  # fmt: skip
    assert options.topics == ("a", "b") and options.partitions == frozenset({0, 2})
    assert options.window.from_offset == 5 and options.window.to_time == 1_795_334_400_000
    assert options.key_sources == (("/k1", None), ("/k2", None)) and options.verify is False
    for wrong, message in (
        ({}, "no backup root"),
        ({"path": "/b", "fromOffst": "1"}, "unknown option 'fromOffst'"),
        ({"path": "/b", "partitions": "x"}, "partitions takes partition numbers, not 'x'"),
        ({"path": "/b", "fromOffset": "-1"}, "fromOffset takes an offset"),
        ({"path": "/b", "fromOffset": "9", "toOffset": "3"}, "fromOffset is above toOffset"),
        ({"path": "/b", "verify": "yes"}, "verify takes true or false, not 'yes'"),
        ({"path": "/b", "fromTimestamp": "yesterday"}, "option fromTimestamp takes ISO 8601"),
        ({"path": "/b", "maxBytesPerTask": "0"}, "maxBytesPerTask"),
        ({"path": "/b", "columns": "offset,val"}, "option columns names 'val', not a column of the rows"),
    ):
        with pytest.raises(UsageError, match=message):
            scan_options(wrong)


def test_errors_of_the_library_name_the_options_a_reader_sets_and_the_jobs_get_their_flags_back() -> None:
    from spark_kafka_backup.datasource.scan_options import in_flag_words, in_option_words

    said = "a key is needed (--encryption-key-file FILE or --encryption-key-env VAR); --skip-bad-segments-like words"
    reworded = in_option_words(said)
    assert reworded == (
        "a key is needed (option encryptionKeyFile FILE or option encryptionKeyEnv VAR); --skip-bad-segments-like words"
    )
    assert in_flag_words(reworded) == said
    assert in_flag_words("the option skipBadSegments reads the rest") == "--skip-bad-segments reads the rest"


@settings(max_examples=60, deadline=None)
@given(record_runs())
def test_rows_hold_exactly_the_records_the_reference_reader_gives(records: list[Record]) -> None:
    """Timestamps within what Spark holds (int64 microseconds); beyond it, see the next test."""
    import tempfile

    records = [r._replace(timestamp=r.timestamp % 10**15) if r.timestamp is not None else r for r in records]
    with tempfile.TemporaryDirectory() as directory:
        with PartitionWriter(Path(directory) / "t", "t", 4, max_segment_size=700, fsync=False) as writer:
            for record in records:
                writer.append(record)
        reader = PartitionReader(Path(directory) / "t", 4)
        rows = [kafka_rows(batch, "t", 4) for batch in reader.record_batches()]
        assert all(batch.schema == KAFKA_ROWS_SCHEMA for batch in rows)
        # Timestamps as their int64 microseconds: Python's datetime holds years 1 to 9999 only.
        got = [row for batch in rows for row in _with_micros(batch).to_pylist()]
        assert [(row["topic"], row["partition"]) for row in got] == [("t", 4)] * len(records)
        assert [_as_record(row) for row in got] == [_comparable(record) for record in reader.records()]
        # Only the columns a query reads: keys, values and headers not asked for are null, the rest as before.
        asked = frozenset({"offset", "key", "timestamp"})
        narrow = [kafka_rows(batch, "t", 4, columns=asked) for batch in reader.record_batches()]
        assert all(batch.schema == KAFKA_ROWS_SCHEMA for batch in narrow)
        thin = [row for batch in narrow for row in _with_micros(batch).to_pylist()]
        assert [(row["offset"], row["key"], row["timestamp"]) for row in thin] == [
            (row["offset"], row["key"], row["timestamp"]) for row in got
        ]
        assert all(row["value"] is None and row["headers"] is None for row in thin)


def test_a_timestamp_spark_cannot_hold_is_an_error_naming_its_offset(tmp_path: Path) -> None:
    with PartitionWriter(tmp_path / "t", "t", 0, fsync=False) as writer:
        writer.append(Record(7, 0, 1_700_000_000_000, b"k", b"v", ()))
        writer.append(Record(9, 0, 2**62, b"k", b"v", ()))
        writer.append(Record(11, 1, -(2**63), b"k", b"v", ()))
    (batch,) = PartitionReader(tmp_path / "t", 0).record_batches()
    with pytest.raises(InvalidRecordError, match=r"topic 't' partition 0 offset 9: timestamp 4611686018427387904 ms"):
        kafka_rows(batch, "t", 0)
    with pytest.raises(InvalidRecordError, match=r"offset 11: timestamp -9223372036854775808 ms"):
        kafka_rows(batch.rows(2, 3), "t", 0)
    assert kafka_rows(batch.head(1), "t", 0).column("offset").to_pylist() == [7]


def _with_micros(batch: pa.RecordBatch) -> pa.RecordBatch:
    at = batch.schema.get_field_index("timestamp")
    return batch.set_column(at, "timestamp", batch.column(at).cast(pa.int64()))


def _as_record(row: dict[str, object]) -> tuple[object, ...]:
    stamp = row["timestamp"]
    millis = None if stamp is None else stamp // 1000  # type: ignore[operator]
    headers = tuple((h["key"], h["value"]) for h in row["headers"] or ())  # type: ignore[attr-defined]
    return (row["offset"], row["timestampType"], millis, row["key"], row["value"], headers)


def _comparable(record: Record) -> tuple[object, ...]:
    """What a row says of a record: CreateTime with a null timestamp (-2 on disk) is CreateTime without one."""
    kind = 0 if record.timestamp_type == -2 else record.timestamp_type
    stamp = record.timestamp if record.timestamp_type in (0, 1) else None
    return (record.offset, kind, stamp, record.key, record.value, tuple(record.headers))


def test_the_plan_reads_whole_segments_the_catalog_says_can_match(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    for partition in (0, 1):
        with PartitionWriter(root / "t", "t", partition, max_segment_size=3000, fsync=False,
                             ledger=CatalogLedger(root)) as writer:  # fmt: skip
            for i in range(300):
                writer.append(sample_record(i))
    catalog = read_catalog(root, "t", 1)
    assert catalog is not None and len(catalog.segments) > 6
    options = scan_options({"path": str(root), "maxBytesPerTask": "1"})
    everything = plan_scans(options)
    assert [(scan.partition, scan.names) for scan in everything if scan.partition == 1][: len(catalog.segments)] == [
        (1, (entry.name,)) for entry in catalog.segments
    ]
    # Offsets 300..330 of partition 1 only: the one or two segments holding them, read from offset 300.
    narrow = plan_scans(scan_options({"path": str(root), "maxBytesPerTask": "1", "partitions": "1",
                                      "fromOffset": "300", "toOffset": "330"}))  # fmt: skip
    holding = [e.name for e in catalog.segments if e.first_offset <= 330 and e.last_offset >= 300]  # type: ignore[operator]
    assert [name for scan in narrow for name in scan.names] == holding
    rows = [row for scan in narrow for batch in read_scan(scan) for row in batch.to_pylist()]
    assert [row["offset"] for row in rows] == list(range(300, 331, 3))
    # Times: sample records of kinds 0 and 1 carry 1_700_000_000_000 + i; a window inside partition 0's second half.
    timed = plan_scans(scan_options({"path": str(root), "partitions": "0", "fromTimestamp": "1700000000200"}))
    kept = [name for scan in timed for name in scan.names]
    first = read_catalog(root, "t", 0)
    assert first is not None
    assert set(kept) >= {e.name for e in first.segments if (e.max_timestamp or 0) >= 1_700_000_000_200}
    assert not set(kept) & {e.name for e in first.segments if (e.max_timestamp or 0) < 1_700_000_000_200}
    assert [row["offset"] for scan in timed for batch in read_scan(scan) for row in batch.to_pylist()] == [
        3 * i for i in range(200, 300) if i % 4 < 2
    ]
    with pytest.raises(BackupNotFoundError, match=r"topic 'other' .* is not in backup"):
        plan_scans(scan_options({"path": str(root), "topics": "other"}))


def test_named_columns_fill_only_themselves_and_offsets_alone_come_from_the_indexes(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    with PartitionWriter(root / "t", "t", 0, max_segment_size=800, fsync=False, ledger=CatalogLedger(root)) as writer:
        for i in range(60):
            writer.append(sample_record(i))
    everything = [row for scan in plan_scans(scan_options({"path": str(root), "logPlan": "false"}))
                  for batch in read_scan(scan) for row in batch.to_pylist()]  # fmt: skip
    assert len(everything) == 60
    for named in ("topic,partition,offset", "offset,key", "offset,timestamp", "offset,headers,value"):
        options = {"path": str(root), "logPlan": "false", "columns": named, "fromOffset": "30"}
        rows = [
            row for scan in plan_scans(scan_options(options)) for batch in read_scan(scan) for row in batch.to_pylist()
        ]
        filled = set(named.split(",")) | {"topic", "partition", "offset"}
        if "timestamp" in filled:
            filled.add("timestampType")
        wanted = [{name: value if name in filled else None for name, value in row.items()}
                  for row in everything if row["offset"] >= 30]  # fmt: skip
        assert rows == wanted, named


def _timed(i: int, at: int) -> Record:
    """Record ``i`` at time ``at`` (none every third record: it takes no part in a time range)."""
    return Record(i, 0 if i % 3 else -1, None if i % 3 == 0 else at, b"k", b"v")


def _segments_read(root: Path, since: int | None = None, until: int | None = None) -> int:
    options = {"path": str(root), "logPlan": "false"}
    if since is not None:
        options["fromTimestamp"] = str(since)
    if until is not None:
        options["toTimestamp"] = str(until)
    return sum(len(scan.segments) for scan in plan_scans(scan_options(options)))


def test_the_newest_segment_is_pruned_by_time_where_its_writer_kept_its_times(tmp_path: Path) -> None:
    """A partition's newest segment (one segment of default size: all of it) has no catalog entry; its recorded
    prefix carries the times its writers kept, apart from the tail older readers take whole (``tailTimes``)."""
    root = tmp_path / "backup"
    with PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root)) as writer:
        for i in range(100):
            writer.append(_timed(i, 1_000 + i))
    tail = read_catalog(root, "t", 0).tail  # type: ignore[union-attr]
    assert tail is not None and (tail.min_timestamp, tail.max_timestamp, tail.times) == (1_001, 1_098, True)
    assert (_segments_read(root), _segments_read(root, until=999), _segments_read(root, since=1_099)) == (1, 0, 0)
    assert (_segments_read(root, since=1_098), _segments_read(root, 1_050, 1_050)) == (1, 1)
    # A writer appending: bytes past the recorded prefix, of times nothing vouches for yet, are read.
    with PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root)) as writer:
        for i in range(100, 130):
            writer.append(_timed(i, 5_000 + i))
        writer.flush()
        assert _segments_read(root, since=5_000) == 1
    assert _segments_read(root, since=5_129) == 0 and _segments_read(root, since=5_128) == 1
    # A writer stopped before it recorded its records (killed): the next one takes them over with their times.
    catalog_file = next((root / "kbackup~state" / "catalog").rglob("partition_000.json"))
    recorded = catalog_file.read_bytes()
    with PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root)) as writer:
        for i in range(130, 140):
            writer.append(_timed(i, 9_000 + i))
    catalog_file.write_bytes(recorded)  # as if killed after its records were synced, before the catalog
    with PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root)) as writer:
        writer.append(_timed(140, 2_000))
    tail = read_catalog(root, "t", 0).tail  # type: ignore[union-attr]
    assert tail is not None and (tail.records, tail.min_timestamp, tail.max_timestamp, tail.times) == (
        141, 1_001, 9_139, True)  # fmt: skip
    assert _segments_read(root, since=9_139) == 1 and _segments_read(root, since=9_140) == 0


def test_a_tail_time_range_vouches_only_for_the_prefix_it_names(tmp_path: Path) -> None:
    """``tailTimes`` of another prefix (recorded before a writer that did not know it extended the tail) says
    nothing; a catalog without it reads as before; a wrong one is an error naming the file."""
    from spark_kafka_backup.catalog.model import PartitionCatalog

    root = tmp_path / "backup"
    with PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root)) as writer:
        for i in range(10):
            writer.append(_timed(i, 1_000 + i))
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None
    document = json.loads(catalog.encode())
    assert set(document["tail"]) == {"name", "firstOffset", "lastOffset", "records", "recordsBytes", "indexBytes",
                                     "recordsCrc32c", "indexCrc32c"}  # fmt: skip
    assert document["tailTimes"] == {"name": catalog.tail.name, "records": 10, "minTimestamp": 1_001,  # type: ignore[union-attr]
                                     "maxTimestamp": 1_008}  # fmt: skip
    for times, vouches in (
        (document["tailTimes"], True),
        ({**document["tailTimes"], "records": 9}, False),
        ({**document["tailTimes"], "name": "segment_partition_000_from_offset_0000000001"}, False),
        (None, False),
    ):
        changed = {**document, "tailTimes": times}
        decoded = PartitionCatalog.decode(json.dumps(changed).encode(), file="c.json")
        assert decoded.tail is not None and decoded.tail.times is vouches
    with pytest.raises(FormatError, match="invalid tailTimes"):
        PartitionCatalog.decode(json.dumps({**document, "tailTimes": {"minTimestamp": "1"}}).encode(), file="c.json")


def test_segments_reaching_into_the_next_ones_offsets_are_refused_across_tasks(tmp_path: Path) -> None:
    """Without a catalog every segment is a task of its own; a segment holding offsets of the next one (0-9, then a
    segment starting at 5) is an error, as the partition reader's, never the offsets 5-9 twice."""
    from tests.backup_builders import write_original_style

    write_original_style(tmp_path / "t", 0, [
        [Record(offset, 0, 1_700_000_000_000, b"k", b"v", ()) for offset in range(0, 10)],
        [Record(offset, 0, 1_700_000_000_000, b"k", b"v", ()) for offset in range(5, 15)],
    ])  # fmt: skip
    scans = plan_scans(scan_options({"path": str(tmp_path)}))
    assert [len(scan.segments) for scan in scans] == [1, 1] and scans[0].next_start == 5
    with pytest.raises(FormatError, match=r"reaches into the next segment.s offsets: expected offsets < 5 .*, found 9"):
        [batch for scan in scans for batch in read_scan(scan)]


def test_a_catalog_is_trusted_for_pruning_only_where_it_is_checked(tmp_path: Path) -> None:
    """With verify=false the plan reads as ``cat --no-verify`` does, by the partition index alone: a catalog entry
    saying a segment holds nothing does not hide its records."""
    import dataclasses

    from spark_kafka_backup.catalog.store import write_catalog

    root = tmp_path / "backup"
    with PartitionWriter(root / "t", "t", 0, max_segment_size=3000, fsync=False, ledger=CatalogLedger(root)) as writer:
        for i in range(100):
            writer.append(sample_record(i))
    catalog = read_catalog(root, "t", 0)
    assert catalog is not None
    hidden = dataclasses.replace(catalog.segments[1], records=0, first_offset=None, last_offset=None,
                                 min_timestamp=None, max_timestamp=None)  # fmt: skip
    write_catalog(root, dataclasses.replace(catalog, segments=(catalog.segments[0], hidden, *catalog.segments[2:])))
    unverified = plan_scans(scan_options({"path": str(root), "verify": "false", "fromTimestamp": "1700000000000"}))
    offsets = [row["offset"] for scan in unverified for batch in read_scan(scan) for row in batch.to_pylist()]
    assert offsets == [3 * i for i in range(100) if i % 4 < 2]


def test_repeated_topics_read_once_and_missing_partitions_are_named(tmp_path: Path) -> None:
    root = tmp_path / "backup"
    with PartitionWriter(root / "t", "t", 0, fsync=False, ledger=CatalogLedger(root)) as writer:
        for i in range(10):
            writer.append(sample_record(i))
    assert len(plan_scans(scan_options({"path": str(root), "topics": "t,t"}))) == 1
    with pytest.raises(BackupNotFoundError, match=r"partition 7 \(option partitions\) is in none of the topics read"):
        plan_scans(scan_options({"path": str(root), "partitions": "7"}))
    with pytest.raises(UsageError, match=r"is a topic directory; pass the backup root .* and the option topics t"):
        plan_scans(scan_options({"path": str(root / "t")}))
    for wrong, message in (({"path": "/b", "paths": "/a,/b"}, "one backup root per read"),
                           ({"path": "/b", "partitions": "²"}, "partitions takes partition numbers"),
                           ({"path": "/b", "fromOffset": "²"}, "fromOffset takes an offset")):  # fmt: skip
        with pytest.raises(UsageError, match=message):
            scan_options(wrong)


def test_a_partition_whose_catalog_is_lost_is_refused_unchecked_or_left_out(tmp_path: Path) -> None:
    from spark_kafka_backup.catalog.store import catalog_path

    root = tmp_path / "backup"
    for partition in (0, 1):
        with PartitionWriter(root / "t", "t", partition, max_segment_size=3000, fsync=False,
                             ledger=CatalogLedger(root)) as writer:  # fmt: skip
            for i in range(60):
                writer.append(sample_record(i))
    lost = catalog_path(root, "t", 1)
    assert isinstance(lost, Path)
    lost.unlink()
    with pytest.raises(DamagedBackupError, match=r"nothing was read: topic 't' partition 1: segment .*catalog"):
        plan_scans(scan_options({"path": str(root)}))
    skipped = plan_scans(scan_options({"path": str(root), "skipBadSegments": "true"}))
    assert {scan.partition for scan in skipped} == {0}
    unchecked = plan_scans(scan_options({"path": str(root), "verify": "false"}))
    assert {scan.partition for scan in unchecked} == {0, 1}
