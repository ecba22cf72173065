"""Schema ids rewritten on columns equal the reference, record by record, and stop at the same record (no broker).

Random batches of keys and values (null, short, not starting with 0x00, in the wire format with ids the map
holds, moves or lacks), every combination of rewritten and checked fields, lenient or not, rows in the batch's
order or a shuffled stream order, sliced batches: :class:`ColumnIdRewrite` gives the bytes
:meth:`IdRewrite.record` gives, or raises its error for the first record it would stop at.
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from spark_kafka_backup.errors import SchemaIdError
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.schema_registry.wire import IdRewrite
from spark_kafka_backup.schema_registry.wire_columns import ColumnIdRewrite


def _field(rng: random.Random) -> bytes | None:
    choice = rng.random()
    if choice < 0.1:
        return None
    if choice < 0.2:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(6)))
    if choice < 0.3:
        return b"\x01" + bytes(8)
    payload = bytes(rng.randrange(256) for _ in range(rng.randrange(10)))
    return b"\x00" + rng.choice([1, 2, 3, 7, 9, 300, 70000]).to_bytes(4, "big") + payload


@pytest.mark.parametrize("seed", range(8))
def test_columns_are_rewritten_and_refused_as_the_reference_does(seed: int) -> None:
    rng = random.Random(seed)
    rewritten = 0
    for _ in range(60):
        records = [Record(i * 2, 0, 1000 + i, _field(rng), _field(rng)) for i in range(rng.randrange(1, 40))]
        ids = {1: 1, 2: 5, 3: 300, 7: 7, 300: 2} | ({9: 9, 70000: 11} if rng.random() < 0.5 else {})
        key, value = rng.random() < 0.5, rng.random() < 0.5
        rewrite = IdRewrite(ids, key=key, value=value, check_key=not key and rng.random() < 0.5,
                            check_value=not value and rng.random() < 0.5, lenient=rng.random() < 0.2)  # fmt: skip
        partitions = np.array([rng.randrange(3) for _ in records], dtype=np.int64)
        offsets = np.array([r.offset for r in records], dtype=np.int64)
        rank = np.array(rng.sample(range(len(records)), len(records)), dtype=np.int64)
        expected: list[Record | None] = [None] * len(records)
        stop = None
        for row in sorted(range(len(records)), key=lambda row: int(rank[row])):
            try:
                expected[row] = rewrite.record(records[row], topic="t", partition=int(partitions[row]))
            except SchemaIdError as error:
                stop = str(error)
                break
        batch = pa.RecordBatch.from_arrays(
            [pa.array([r.key for r in records], pa.large_binary()), pa.array([r.value for r in records],
             pa.large_binary())], names=["key", "value"]
        )  # fmt: skip
        columns = ColumnIdRewrite(rewrite)
        if stop is not None:
            with pytest.raises(SchemaIdError) as found:
                columns.apply(batch, topic="t", partitions=partitions, offsets=offsets, rank=rank)
            assert str(found.value) == stop
            continue
        rewritten += 1
        out = columns.apply(batch, topic="t", partitions=partitions, offsets=offsets, rank=rank)
        assert out.column("key").to_pylist() == [r.key for r in expected if r is not None]
        assert out.column("value").to_pylist() == [r.value for r in expected if r is not None]
        assert batch.column("value").to_pylist() == [r.value for r in records]  # the input is left as it was
        tail = columns.apply(batch.slice(3), topic="t", partitions=partitions[3:], offsets=offsets[3:])
        assert tail.column("value").to_pylist() == [r.value for r in expected[3:] if r is not None]
    assert rewritten > 10  # the trials were not all refusals


@pytest.mark.parametrize("kind", [pa.binary(), pa.large_binary()])
def test_the_ids_a_column_names_are_found_in_slices_too(kind: pa.DataType) -> None:
    from spark_kafka_backup.schema_registry.wire_columns import wire_schema_ids

    def wired(schema_id: int) -> bytes:
        return b"\x00" + schema_id.to_bytes(4, "big")

    column = pa.array([wired(5), None, wired(1), b"\x00\x00", wired(1), b"\x02" + bytes(4), wired(70000)], kind)
    assert wire_schema_ids(column).tolist() == [1, 5, 70000]
    assert wire_schema_ids(column.slice(1, 3)).tolist() == [1]
    assert wire_schema_ids(column.slice(3, 3)).tolist() == [1]
    assert wire_schema_ids(column.slice(0, 0)).tolist() == []
