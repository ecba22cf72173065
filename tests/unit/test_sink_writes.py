"""The kbackup_v1 sink's executor side on Arrow batches (no Spark needed to call it): placement and accounting."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from spark_kafka_backup.errors import InvalidRecordError, UsageError
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.spark import backup_files, kafka_task
from spark_kafka_backup.spark.backup_files import WRITES_SCHEMA, BatchFiles, PartitionWrite, writes_batch
from spark_kafka_backup.spark.kafka_schema import kafka_schema
from spark_kafka_backup.spark.kafka_task import gathered
from spark_kafka_backup.spark.source_options import SourceOptions
from spark_kafka_backup.spark.v1_sink import SinkOptions, V1StreamWriter

SCHEMA = to_arrow_schema(kafka_schema(True), timezone="UTC")


def batch(topic: str, partition: int, offsets: list[int]) -> pa.RecordBatch:
    n = len(offsets)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([b"k%d" % o for o in offsets], pa.binary()),
            pa.array([b"%s-%d-%d" % (topic.encode(), partition, o) for o in offsets], pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array([1_700_000_000_000_000 + o * 1000 for o in offsets], pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
            pa.array(
                [[{"key": "h", "value": b"%d" % o}] if o % 2 else None for o in offsets], SCHEMA.field("headers").type
            ),
        ],
        schema=SCHEMA,
    )


def expected(topic: str, partition: int, offsets: list[int]) -> list[Record]:
    return [
        Record(o, 0, 1_700_000_000_000 + o, b"k%d" % o, b"%s-%d-%d" % (topic.encode(), partition, o),
               (("h", b"%d" % o),) if o % 2 else ())
        for o in offsets
    ]  # fmt: skip


@pytest.mark.parametrize("open_limit", [1, 2, 32])
def test_interleaved_partitions_are_placed_and_counted_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, open_limit: int
) -> None:
    """A packed task may hand the sink A, B, A, C, B...: every record lands once; each partition is counted once."""
    monkeypatch.setattr(backup_files, "MAX_OPEN_PARTITIONS", open_limit)
    writer = V1StreamWriter(SinkOptions.parse({"path": str(tmp_path), "fsync": "false"}))
    batches = [
        batch("a", 0, [0, 1, 2]),
        batch("b", 1, [5, 6]),
        batch("a", 0, [3, 4]),
        batch("c", 0, [0]),
        batch("b", 1, [9]),
        batch("a", 0, [5]),
    ]
    message = writer.write(iter(batches))
    got = {(w.topic, w.partition): (w.first_offset, w.last_offset, w.written, w.skipped) for w in message.partitions}
    assert got == {("a", 0): (0, 5, 6, 0), ("b", 1): (5, 9, 3, 0), ("c", 0): (0, 0, 1, 0)}
    assert sum(w.bytes for w in message.partitions) == sum(
        p.stat().st_size - 1 for p in tmp_path.glob("*/segment_*_records")
    )
    assert list(PartitionReader(tmp_path / "a", 0).records()) == expected("a", 0, [0, 1, 2, 3, 4, 5])
    assert list(PartitionReader(tmp_path / "b", 1).records()) == expected("b", 1, [5, 6, 9])
    # The same batches again (a replayed micro-batch): everything found stored, nothing written.
    again = V1StreamWriter(SinkOptions.parse({"path": str(tmp_path), "fsync": "false"})).write(iter(batches))
    assert {(w.topic, w.written, w.skipped) for w in again.partitions} == {("a", 0, 6), ("b", 0, 3), ("c", 0, 1)}


def test_one_batch_of_many_partitions(tmp_path: Path) -> None:
    """Rows of 40 partitions in one Arrow batch (more than stay open at once)."""
    parts = [batch(f"t{n % 4}", n, [n, n + 1]) for n in range(40)]
    combined = pa.Table.from_batches(parts).combine_chunks().to_batches()[0]
    message = V1StreamWriter(SinkOptions.parse({"path": str(tmp_path), "fsync": "false"})).write(iter([combined]))
    assert len(message.partitions) == 40 and all(w.written == 2 for w in message.partitions)
    for n in range(40):
        assert list(PartitionReader(tmp_path / f"t{n % 4}", n).records()) == expected(f"t{n % 4}", n, [n, n + 1])


def _interleaved() -> list[pa.RecordBatch]:
    return [batch("a", 0, [0, 1, 2]), batch("b", 1, [5, 6]), batch("a", 0, [3, 4]), batch("c", 0, [0]),
            batch("b", 1, [9]), batch("a", 0, [5])]  # fmt: skip


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.glob("*/*")) if p.is_file()}


def test_a_packed_tasks_small_batches_are_written_together_into_the_same_files(tmp_path: Path) -> None:
    """A task of many small partitions writes its batches joined (one encoding for all): the same files, counts and
    order as written one batch at a time."""
    joined = list(gathered(iter(_interleaved())))
    assert len(joined) == 1 and joined[0].to_pylist() == pa.Table.from_batches(_interleaved()).to_pylist()
    one_by_one = V1StreamWriter(SinkOptions.parse({"path": str(tmp_path / "one"), "fsync": "false"}))
    together = V1StreamWriter(SinkOptions.parse({"path": str(tmp_path / "joined"), "fsync": "false"}))
    first, second = one_by_one.write(iter(_interleaved())), together.write(iter(joined))
    counted = [sorted((replace(w, lock_wait=0) for w in m.partitions), key=str) for m in (first, second)]
    assert counted[0] == counted[1] and len(counted[0]) == 3
    assert _files(tmp_path / "one") == _files(tmp_path / "joined") != {}
    assert list(PartitionReader(tmp_path / "joined" / "a", 0).records()) == expected("a", 0, [0, 1, 2, 3, 4, 5])


def test_small_batches_are_joined_up_to_the_limits_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_task, "GATHER_ROWS", 4)
    sizes = [3, 2, 2, 1, 1, 1, 9, 1]
    batches = [batch("t", n, list(range(size))) for n, size in enumerate(sizes)]
    joined = list(gathered(iter(batches)))
    assert [b.num_rows for b in joined] == [3, 4, 3, 9, 1]  # one larger than the limit passes alone
    assert pa.Table.from_batches(joined).to_pylist() == pa.Table.from_batches(batches).to_pylist()
    monkeypatch.setattr(kafka_task, "GATHER_BYTES", 1)
    assert [b.num_rows for b in gathered(iter(batches))] == sizes
    assert list(gathered(iter([]))) == []


def test_an_invalid_record_among_many_partitions_is_named_as_when_written_alone(tmp_path: Path) -> None:
    bad = batch("b", 0, [7]).set_column(4, "offset", pa.array([-1], pa.int64()))
    joined = pa.concat_batches([batch("a", 0, [0, 1]), bad])
    for written in ([joined], [bad]):  # among many partitions or alone: the record's topic, partition and offset
        with pytest.raises(InvalidRecordError, match=r"^topic 'b' partition 0: record at offset -1\b"):
            V1StreamWriter(SinkOptions.parse({"path": str(tmp_path), "fsync": "false"})).write(iter(written))


def test_files_written_by_the_source_are_the_sinks_files(tmp_path: Path) -> None:
    """writeTo: the source's task writes with BatchFiles and hands on one row per partition; the sink takes the rows
    back as the commit message the sink's own write would have returned, for the same files."""
    batches = [batch("a", 0, [0, 1, 2]), batch("b", 1, [5, 6]), batch("a", 0, [3])]
    by_sink = V1StreamWriter(SinkOptions.parse({"path": str(tmp_path / "sink"), "fsync": "false"})).write(iter(batches))
    options = SinkOptions.parse({"path": str(tmp_path / "source"), "fsync": "false"})
    files = BatchFiles(options, None)
    for each in batches:
        files.write(each)
    rows = writes_batch(str(options.target), files.finish())
    assert rows.schema == WRITES_SCHEMA and rows.num_rows == 2
    by_source = V1StreamWriter(options, written_by_source=True).write(iter([rows]))
    accounted = [replace(write, lock_wait=0.0) for write in by_source.partitions]
    assert accounted == [replace(write, lock_wait=0.0) for write in by_sink.partitions]
    assert [w.lock_wait for w in by_source.partitions] == rows.column("lock_wait").to_pylist()
    for topic, partition in (("a", 0), ("b", 1)):
        sink_files = sorted(p.name for p in (tmp_path / "sink" / topic).iterdir())
        assert sink_files == sorted(p.name for p in (tmp_path / "source" / topic).iterdir())
        for name in sink_files:
            if name.startswith("segment_"):
                assert (tmp_path / "sink" / topic / name).read_bytes() == (
                    tmp_path / "source" / topic / name
                ).read_bytes(), name
        assert list(PartitionReader(tmp_path / "source" / topic, partition).records()) == list(
            PartitionReader(tmp_path / "sink" / topic, partition).records()
        )


def test_rows_written_under_another_root_are_refused(tmp_path: Path) -> None:
    rows = writes_batch("/elsewhere", [PartitionWrite("a", 0, 0, 3, written=4, bytes=100)])
    writer = V1StreamWriter(SinkOptions.parse({"path": str(tmp_path)}), written_by_source=True)
    with pytest.raises(UsageError, match=r"wrote a/0 to '/elsewhere', but the sink's path is"):
        writer.write(iter([rows]))


def test_a_task_that_fails_leaves_nothing_synced_it_did_not_report(tmp_path: Path) -> None:
    files = BatchFiles(SinkOptions.parse({"path": str(tmp_path), "fsync": "false"}), None)
    files.write(batch("a", 0, [0, 1]))
    files.abandon()
    # the next writer repairs the unsynced tail; the replay writes what was not reported
    again = BatchFiles(SinkOptions.parse({"path": str(tmp_path), "fsync": "false"}), None)
    again.write(batch("a", 0, [0, 1, 2]))
    (write,) = again.finish()
    assert (write.first_offset, write.last_offset, write.written + write.skipped) == (0, 2, 3)
    assert list(PartitionReader(tmp_path / "a", 0).records()) == expected("a", 0, [0, 1, 2])


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ("{torn", "option writeTo must be a JSON object of the sink's options as strings"),
        ('{"path": "/b", "fsync": false}', "option writeTo must be a JSON object of the sink's options as strings"),
        ('["/b"]', "option writeTo must be a JSON object"),
        ('{"fsync": "true"}', "the kbackup_v1 sink needs a path"),
        ('{"path": "/b", "colour": "red"}', "unknown option 'colour' for the kbackup_v1 sink"),
    ],
)
def test_write_to_takes_the_sinks_options(given: str, error: str) -> None:
    base = {"kafka.bootstrap.servers": "k:1", "subscribe": "a"}
    assert SourceOptions.parse(base).write_to is None
    parsed = SourceOptions.parse({**base, "writeTo": '{"path": "/b", "compression": "zstd"}'}).write_to
    assert parsed is not None and str(parsed.target) == "/b" and parsed.compression == "zstd"
    with pytest.raises(UsageError, match=re.escape(error)):
        SourceOptions.parse({**base, "writeTo": given})


def test_write_to_reads_headers_and_accepts_another_spelling_of_the_sinks_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = {"kafka.bootstrap.servers": "k:1", "subscribe": "a"}
    assert not SourceOptions.parse(base).include_headers
    assert SourceOptions.parse({**base, "writeTo": '{"path": "/b"}'}).include_headers  # files keep every header
    monkeypatch.chdir(tmp_path)
    rows = writes_batch("backups/../backups", [PartitionWrite("a", 0, 0, 3, written=4, bytes=100)])
    writer = V1StreamWriter(SinkOptions.parse({"path": str(tmp_path / "backups")}), written_by_source=True)
    assert [w.written for w in writer.write(iter([rows])).partitions] == [4]


def _wired_batch(topic: str, partition: int, keys: list[bytes | None], values: list[bytes | None]) -> pa.RecordBatch:
    plain = batch(topic, partition, list(range(len(keys))))
    columns = [pa.array(keys, pa.binary()), pa.array(values, pa.binary()), *plain.columns[2:]]
    return pa.RecordBatch.from_arrays(columns, schema=SCHEMA)


def test_tasks_report_the_schema_ids_their_records_name_and_the_commit_lists_new_ones(tmp_path: Path) -> None:
    """With ``schemaIds``, each partition's write names the distinct ids of its keys and values in the wire format
    (not null, short, or other first bytes); the driver's commit adds new ones to ``kbackup~state/schema-ids.json``."""
    from spark_kafka_backup.schema_registry.seen_ids import read_seen_ids, record_seen_ids
    from spark_kafka_backup.spark.v1_sink import record_schema_ids

    def wired(schema_id: int) -> bytes:
        return b"\x00" + schema_id.to_bytes(4, "big") + b"payload"

    options = SinkOptions.parse({"path": str(tmp_path), "fsync": "false", "schemaIds": "true"})
    batches = [
        _wired_batch("a", 0, [wired(7), None, b"\x00\x00\x00\x01", wired(2**32 - 1)], [wired(3), wired(3), b"", None]),
        _wired_batch("b", 0, [b"\x01" + bytes(8), wired(9)], [wired(0), b"\x00\x00\x00\x00\x05"]),
    ]
    message = V1StreamWriter(options).write(iter(batches))
    assert {(w.topic, w.schema_ids) for w in message.partitions} == {("a", (3, 7, 2**32 - 1)), ("b", (0, 5, 9))}
    # Through the rows a source that wrote the files hands on, and back.
    rows = writes_batch(str(tmp_path), message.partitions)
    assert [w.schema_ids for w in backup_files.writes_from_batch(rows, str(tmp_path))] == [(3, 7, 2**32 - 1), (0, 5, 9)]
    record_schema_ids(tmp_path, message.partitions)
    assert read_seen_ids(tmp_path) == {"a": {3, 7, 2**32 - 1}, "b": {0, 5, 9}}
    assert not record_seen_ids(tmp_path, {"a": [3]})  # nothing new: not written again
    assert record_seen_ids(tmp_path, {"c": [1]}) and read_seen_ids(tmp_path)["c"] == {1}
    # Without the option nothing is looked at.
    plain = V1StreamWriter(SinkOptions.parse({"path": str(tmp_path / "other"), "fsync": "false"}))
    assert all(w.schema_ids == () for w in plain.write(iter(batches)).partitions)


def test_a_damaged_schema_ids_file_is_one_error_naming_it(tmp_path: Path) -> None:
    from spark_kafka_backup.errors import FormatError
    from spark_kafka_backup.schema_registry.seen_ids import read_seen_ids, seen_ids_path

    path = seen_ids_path(tmp_path)
    assert isinstance(path, Path)
    path.parent.mkdir(parents=True)
    for damage in (b'{"version": 1, "topics": {"a": [-1]}}', b'{"version": 2, "topics": {}}', b"[1", b'{"topics": 1}'):
        path.write_bytes(damage)
        with pytest.raises(FormatError, match=r"schema-ids\.json"):
            read_seen_ids(tmp_path)


def test_the_schema_ids_listed_stop_at_a_cap_and_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Data that only looks like the wire format names a new id every few records: the list stops growing."""
    import json

    from spark_kafka_backup.schema_registry import seen_ids

    monkeypatch.setattr(seen_ids, "MAX_SEEN_IDS", 5)
    assert seen_ids.record_seen_ids(tmp_path, {"a": [1, 2, 3]})
    assert not seen_ids.seen_ids_capped(tmp_path)
    assert seen_ids.record_seen_ids(tmp_path, {"a": [3, 4], "b": [10, 11, 12]})
    assert seen_ids.read_seen_ids(tmp_path) == {"a": {1, 2, 3, 4}, "b": {10}}
    assert seen_ids.seen_ids_capped(tmp_path)
    assert json.loads(seen_ids.seen_ids_path(tmp_path).read_text())["capped"] is True  # type: ignore[union-attr]
    assert not seen_ids.record_seen_ids(tmp_path, {"b": [13]})  # full: nothing written
