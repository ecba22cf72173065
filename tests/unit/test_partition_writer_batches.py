"""``PartitionWriter.append_batch`` against record-by-record ``append``: the same files, the same errors."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_kafka_backup.errors import OffsetConflictError, PlacementError, SparkKafkaBackupError
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.format.record_columns import EncodedRecords, encode_columns
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.writer import PartitionWriter
from tests.strategies import record_runs
from tests.unit.test_record_columns import as_columns


def encode(records: list[Record]) -> EncodedRecords:
    return encode_columns(**as_columns(records))


def files(topic_dir: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(topic_dir.iterdir())}


def outcome(run: object) -> tuple[object, object]:
    """What a write does: its result, or the error's type and message."""
    try:
        return ("ok", run())  # type: ignore[operator]
    except SparkKafkaBackupError as exc:
        return (type(exc).__name__, str(exc))


@settings(max_examples=60, deadline=None)
@given(
    record_runs(max_size=40),
    st.lists(st.integers(0, 45), min_size=1, max_size=4),
    st.sampled_from([60, 400, 5000, 1 << 30]),
    st.integers(0, 4),
)
def test_batches_write_the_files_appending_one_by_one_writes(
    records: list[Record], cuts: list[int], segment_size: int, replay: int
) -> None:
    """Batches cut anywhere, segment rolls, and a replay of a stored stretch inside a later batch."""
    batches = []
    bounds = sorted({0, len(records), *(min(c, len(records)) for c in cuts)})
    for start, stop in itertools.pairwise(bounds):
        # Each later batch starts with up to ``replay`` records the writer already holds.
        batches.append(records[max(0, start - replay) : stop])
    with tempfile.TemporaryDirectory() as tmp:
        one, many = Path(tmp) / "one" / "t", Path(tmp) / "many" / "t"
        with PartitionWriter(one, "t", 3, max_segment_size=segment_size, fsync=False) as writer:
            expected = [sum(writer.append(record) for record in batch) for batch in batches]
        with PartitionWriter(many, "t", 3, max_segment_size=segment_size, fsync=False) as writer:
            got = [writer.append_batch(encode(batch)) for batch in batches]
        assert [written for written, _ in got] == expected
        assert [written + skipped for written, skipped in got] == [len(batch) for batch in batches]
        assert files(many) == files(one)
        # And a whole replay after reopening: nothing written, nothing changed.
        with PartitionWriter(many, "t", 3, max_segment_size=segment_size, fsync=False) as writer:
            assert writer.append_batch(encode(records)) == (0, len(records))
        assert files(many) == files(one)


@settings(max_examples=60, deadline=None)
@given(record_runs(max_size=20), st.data())
def test_a_replay_that_differs_fails_as_the_scalar_path_fails(records: list[Record], data: st.DataObject) -> None:
    """Changed content, an offset not stored, offsets going back inside a batch: the same error, same offset."""
    tampered = list(records)
    kind = data.draw(st.sampled_from(["value", "gap", "backwards", "two"]))
    at = data.draw(st.integers(0, len(records) - 1))
    if kind == "value":
        tampered[at] = tampered[at]._replace(value=(tampered[at].value or b"") + b"!")
    elif kind == "gap" and at > 0 and records[at].offset - records[at - 1].offset > 1:
        tampered[at] = tampered[at]._replace(offset=records[at].offset - 1)
    elif kind == "backwards":
        tampered.insert(at + 1, tampered[at])  # the same record twice: a replay of itself
    elif kind == "two":
        # Other content early, a record of another length and a missing offset later: the first one counts.
        tampered[at] = tampered[at]._replace(key=(tampered[at].key or b"") + b"?")
        if at + 1 < len(records):
            tampered[at + 1] = tampered[at + 1]._replace(value=(tampered[at + 1].value or b"") + b"longer")
        if at + 2 < len(records) and records[at + 2].offset - records[at + 1].offset > 1:
            tampered[at + 2] = tampered[at + 2]._replace(offset=records[at + 2].offset - 1)
    with tempfile.TemporaryDirectory() as tmp:
        results = []
        for name, batch_mode in (("one", False), ("many", True)):
            topic_dir = Path(tmp) / name / "t"
            with PartitionWriter(topic_dir, "t", 0, max_segment_size=300, fsync=False) as writer:
                if batch_mode:
                    writer.append_batch(encode(records))
                    results.append(outcome(lambda w=writer: w.append_batch(encode(tampered))))
                else:
                    for record in records:
                        writer.append(record)
                    results.append(outcome(lambda w=writer: sum(w.append(r) for r in tampered)))
        scalar, batched = results
        assert scalar[0] == batched[0]
        if scalar[0] != "ok":
            assert scalar[1] == batched[1]


def test_errors_name_topic_partition_and_offset(tmp_path: Path) -> None:
    records = [Record(o, 0, 1000 + o, b"k", b"v%d" % o, ()) for o in (0, 1, 2, 5, 6)]
    with PartitionWriter(tmp_path / "orders", "orders", 4, fsync=False) as writer:
        writer.append_batch(encode(records))
        with pytest.raises(OffsetConflictError, match="topic 'orders' partition 4 offset 2: offset is already stored"):
            writer.append_batch(encode([records[1], records[2]._replace(value=b"other")]))
        with pytest.raises(PlacementError, match="offset 3: offset is below the last stored offset 6"):
            writer.append_batch(encode([records[2], records[2]._replace(offset=3)]))
    assert list(PartitionReader(tmp_path / "orders", 4).records()) == records


def test_a_replay_onto_a_segment_cut_short_is_a_conflict_as_one_by_one(tmp_path: Path) -> None:
    """A stored segment damaged after it was written: the replay refuses it, naming the first record it cannot match."""
    records = [Record(o, 0, 1000 + o, b"k%d" % o, b"v" * 50, ()) for o in range(10)]
    errors = []
    for name, batch_mode in (("one", False), ("many", True)):
        topic_dir = tmp_path / name / "t"
        with PartitionWriter(topic_dir, "t", 0, max_segment_size=200, fsync=False) as writer:
            for record in records:
                writer.append(record)
        first = min(p for p in topic_dir.iterdir() if p.name.endswith("_records"))
        with open(first, "r+b") as handle:
            handle.truncate(first.stat().st_size - 10)
        with PartitionWriter(topic_dir, "t", 0, max_segment_size=200, fsync=False) as writer:
            if batch_mode:
                errors.append(outcome(lambda w=writer: w.append_batch(encode(records))))
            else:
                errors.append(outcome(lambda w=writer: sum(w.append(r) for r in records)))
    assert errors[0] == errors[1]
    assert errors[0][0] == "OffsetConflictError"
