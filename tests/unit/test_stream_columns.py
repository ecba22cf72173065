"""The columnar merged stream of a repartitioned restore equals its reference, record by record (no broker).

Random topics (several partitions of different lengths, timestamps that go back and forth, records without one,
offset gaps, segments small enough that a partition's records come in many batches), random selections and
target partition counts: :func:`routed_chunks` gives every target partition the records, positions and
backed-up partitions that :func:`routed_records` gives it, in the same order; :func:`count_routed_columns` counts
as :func:`count_routed` does, and so does :func:`count_targets` from the keys alone; murmur2 over a column hashes
as Kafka's scalar murmur2, and with schema ids rewritten both hash the keys as produced and stop at the same
record.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from spark_kafka_backup.errors import SchemaIdError
from spark_kafka_backup.format.arrow_binary import binary_parts
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.selection import Window
from spark_kafka_backup.partition.writer import PartitionWriter
from spark_kafka_backup.restore.repartition import (
    MURMUR2,
    ROUND_ROBIN,
    Repartition,
    Source,
    count_routed,
    murmur2,
    murmur2_columns,
    routed_records,
)
from spark_kafka_backup.restore.stream_columns import count_routed_columns, count_targets, routed_chunks
from spark_kafka_backup.schema_registry.wire import IdRewrite
from spark_kafka_backup.schema_registry.wire_columns import ColumnIdRewrite

WINDOWS = [Window(), Window(from_offset=10, to_offset=80), Window(from_time=1100, to_time=1900)]


def _key(rng: random.Random) -> bytes | None:
    return rng.choice([None, b"", b"a", b"user-%d" % rng.randrange(9), bytes(rng.randrange(256) for _ in range(30)),
                       b"\x00" + rng.choice([1, 2, 9]).to_bytes(4, "big") + b"k%d" % rng.randrange(5)])  # fmt: skip


def _topic(root: Path, rng: random.Random, partitions: int) -> dict[int, PartitionReader]:
    for partition in range(partitions):
        size = rng.choice([300, 2000, 100_000])
        with PartitionWriter(root / "t", "t", partition, fsync=False, max_segment_size=size) as writer:
            offset = 0
            for i in range(rng.randrange(0, 120)):
                offset += rng.choice([1, 1, 1, 2])
                kind = rng.choice([0, 0, 1, -1])
                stamp = None if kind == -1 else rng.choice([1000 + i * 10, rng.randrange(900, 2500), 1500])
                headers = (("h", b"1"),) if i % 3 == 0 else ()
                writer.append(Record(offset, kind, stamp, _key(rng), b"p%do%d" % (partition, offset), headers))
    return {p: PartitionReader(root / "t", p) for p in range(partitions)}


@pytest.mark.parametrize("seed", range(6))
def test_the_columnar_merged_stream_routes_every_record_as_the_reference_does(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    for trial in range(6):
        readers = _topic(tmp_path / str(trial), rng, rng.randrange(1, 5))
        sources = tuple(Source(p, rng.choice(WINDOWS)) for p in readers)
        repartition = Repartition(rng.choice([MURMUR2, ROUND_ROBIN]), rng.randrange(1, 5), sources)
        for target in range(repartition.partitions):
            expected = [(position, source, record) for position, source, record in
                        routed_records(repartition, readers, target)]  # fmt: skip
            found = []
            for chunk in routed_chunks(repartition, readers, target):
                values = chunk.columns.column("value").to_pylist()
                keys = chunk.columns.column("key").to_pylist()
                for row in range(len(chunk)):
                    found.append((int(chunk.positions[row]), int(chunk.partitions[row]), int(chunk.offsets[row]),
                                  keys[row], values[row], chunk.record(row)))  # fmt: skip
            assert [f[:5] for f in found] == [(p, s, r.offset, r.key, r.value) for p, s, r in expected]
            assert [f[5] for f in found] == [r for _, _, r in expected]  # each row, rebuilt as stored
        below = {t: rng.randrange(0, 200) for t in range(repartition.partitions)}
        assert count_routed_columns(repartition, readers, below=below) == count_routed(repartition, readers,
                                                                                       below=below)  # fmt: skip
        assert count_targets(repartition, readers) == count_routed(repartition, readers)[0]  # without the stream


@pytest.mark.parametrize("seed", range(4))
def test_murmur2_with_schema_ids_rewritten_hashes_the_keys_as_produced(tmp_path: Path, seed: int) -> None:
    rng = random.Random(100 + seed)
    readers = _topic(tmp_path, rng, 3)
    ids = {1: 7, 2: 2} if seed % 3 else {1: 7, 2: 2, 9: 1}  # without 9, a key naming it stops both
    rewrite = IdRewrite(ids, key=True, value=False, check_value=True)
    repartition = Repartition(MURMUR2, 3, tuple(Source(p, Window()) for p in readers))

    def produced(record: Record, partition: int) -> Record:
        return rewrite.record(record, topic="t", partition=partition)

    columns = ColumnIdRewrite(rewrite)
    stopped = 0
    for target in range(3):
        expected = _outcome(functools.partial(_routed_reference, repartition, readers, target, produced))
        found = _outcome(functools.partial(_routed_columns, repartition, readers, target, columns))
        assert found == expected
        stopped += isinstance(expected, tuple) and isinstance(expected[1], str)
    assert _outcome(lambda _: count_routed(repartition, readers, produced=produced)) == _outcome(
        lambda _: count_routed_columns(repartition, readers, rewrite=columns, topic="t")
    )
    assert stopped in ((0,) if 9 in ids else (0, 3))  # a key naming id 9 stops every task, at the same record


def _routed_reference(
    repartition: Repartition,
    readers: dict[int, PartitionReader],
    target: int,
    produced: Callable[[Record, int], Record],
    into: list[tuple[int, int, int]],
) -> None:
    for p, s, r in routed_records(repartition, readers, target, produced):
        into.append((p, s, r.offset))


def _routed_columns(
    repartition: Repartition,
    readers: dict[int, PartitionReader],
    target: int,
    rewrite: ColumnIdRewrite,
    into: list[tuple[int, int, int]],
) -> None:
    for c in routed_chunks(repartition, readers, target, rewrite=rewrite, topic="t"):
        into.extend((int(c.positions[i]), int(c.partitions[i]), int(c.offsets[i])) for i in range(len(c)))


def _outcome(work: Callable[..., object]) -> object:
    """What ``work`` gives (into a list, or returns) and the text of the schema id error it stops with: the records
    a stopped stream gave come before the record it stops at."""
    given: list[tuple[int, int, int]] = []
    try:
        returned = work(given)
    except SchemaIdError as stop:
        return given, f"stopped: {stop}"
    return given, returned


def test_murmur2_over_a_column_is_kafkas_murmur2() -> None:
    rng = random.Random(7)
    keys = [None if rng.random() < 0.1 else bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 2, 3, 4, 5,
            7, 8, 13, 40, 200, 1024, 1025, 5000]))) for _ in range(3000)]  # fmt: skip
    column = pa.array(keys, pa.large_binary())
    for part in (column, column.slice(17, 1000), pa.array(keys, pa.binary())):
        hashed = murmur2_columns(binary_parts(part)).view(np.int32).tolist()
        assert hashed == [murmur2(key or b"") for key in part.to_pylist()]
    assert murmur2_columns(binary_parts(pa.array([b"21", b"foobar", b"abc"], pa.large_binary()))).view(
        np.int32
    ).tolist() == [-973932308, -790332482, 479470107]  # Kafka's own
