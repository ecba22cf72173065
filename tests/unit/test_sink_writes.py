"""The kbackup_v1 sink's executor side on Arrow batches (no Spark needed to call it): placement and accounting."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema

from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.spark import v1_sink
from spark_kafka_backup.spark.kafka_reader import kafka_schema
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
    monkeypatch.setattr(v1_sink, "MAX_OPEN_PARTITIONS", open_limit)
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
