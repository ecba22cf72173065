"""spark-kafka-backup's golden vectors in formats/vectors decode to their manifest and re-encode byte for byte."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from spark_kafka_backup.format.consumer_offsets import decode_consumer_offsets, encode_consumer_offsets
from spark_kafka_backup.format.partition_index import (
    PartitionIndexEntry,
    decode_partition_index,
    encode_partition_index,
)
from spark_kafka_backup.format.record import Record, decode_record, encode_record
from spark_kafka_backup.format.segment_index import SegmentIndexEntry, decode_segment_index, encode_segment_index
from spark_kafka_backup.partition.offsets_file import read_consumer_offsets
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.rebuild import rebuild_partition_index, rebuild_segment_index
from tests.conftest import REPO

VECTORS = REPO / "formats" / "vectors"
MANIFEST: dict[str, Any] = json.loads((VECTORS / "manifest.json").read_text())


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def from_json(obj: dict[str, Any]) -> Record:
    return Record(
        obj["offset"],
        obj["timestampTypeId"],
        obj["timestamp"],
        unb64(obj["key"]),
        unb64(obj["value"]),
        tuple((key, unb64(value)) for key, value in obj["headers"]),
    )


@pytest.mark.parametrize("name", sorted(MANIFEST["records"]))
def test_record_vector(name: str) -> None:
    data = (VECTORS / "records" / name).read_bytes()
    expected = from_json(MANIFEST["records"][name])
    assert decode_record(data) == (expected, len(data))
    assert encode_record(expected) == data


def test_every_listed_file_exists_and_nothing_else() -> None:
    present = sorted(
        str(path.relative_to(VECTORS))
        for path in VECTORS.rglob("*")
        if path.is_file() and path.name not in ("manifest.json", "generate.py")
    )
    assert present == sorted(MANIFEST["files"])


@pytest.mark.parametrize(
    ("topic", "partition"), [("vectors-topic", "1234"), ("vectors-topic", "7"), ("shapes-topic", "0")]
)
def test_partition_vector(topic: str, partition: str, tmp_path: Path) -> None:
    topic_dir = VECTORS / "backup" / topic
    expected = MANIFEST["topics"][topic][partition]
    reader = PartitionReader(topic_dir, int(partition))
    assert list(reader.records()) == [from_json(obj) for obj in expected["records"]]
    assert read_consumer_offsets(topic_dir, int(partition)) == expected["consumerOffsets"]

    # The indexes are exactly what an independent rebuild from the records files gives.
    copy = tmp_path / topic
    shutil.copytree(topic_dir, copy)
    for segment in reader.segments:
        rebuild_segment_index(copy / f"{segment.name}_records", copy / f"{segment.name}_index")
        assert (copy / f"{segment.name}_index").read_bytes() == (topic_dir / f"{segment.name}_index").read_bytes()
    rebuild_partition_index(copy, int(partition))
    name = f"index_partition_{int(partition):03d}"
    assert (copy / name).read_bytes() == (topic_dir / name).read_bytes()


def test_consumer_offsets_vector_bytes() -> None:
    path = VECTORS / "backup" / "vectors-topic" / "consumer_offsets_partition_1234"
    offsets = decode_consumer_offsets(path.read_bytes())
    assert encode_consumer_offsets(offsets) == path.read_bytes() == b'{"alpha":12345678903,"zeta":12345679001}'


def test_index_vectors() -> None:
    partition_path = VECTORS / "indexes" / "partition_index_four_segments"
    partition = [PartitionIndexEntry(name, start) for name, start in MANIFEST["indexes"][partition_path.name]]
    data = partition_path.read_bytes()
    assert decode_partition_index(data, file=str(partition_path)) == (partition, len(data))
    assert encode_partition_index(partition) == partition_path.read_bytes()
    segment_path = VECTORS / "indexes" / "segment_index_without_records"
    segment = [SegmentIndexEntry(*entry) for entry in MANIFEST["indexes"][segment_path.name]]
    data = segment_path.read_bytes()
    assert decode_segment_index(data, file=str(segment_path), check_contiguous=False) == segment
    assert encode_segment_index(segment) == segment_path.read_bytes()
