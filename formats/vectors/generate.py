"""Regenerate spark-kafka-backup's golden vectors and their manifest.

Run from the repository root: ``python formats/vectors/generate.py``. The
tests (``tests/unit/test_vectors.py``) check that every file decodes to what
``manifest.json`` says and that encoding the manifest gives the file's bytes,
so a codec change that alters bytes fails until the vectors are regenerated
on purpose (and the format docs updated).
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

from spark_kafka_backup.format.consumer_offsets import encode_consumer_offsets
from spark_kafka_backup.format.partition_index import PartitionIndexEntry, encode_partition_index
from spark_kafka_backup.format.record import Record, encode_record
from spark_kafka_backup.format.segment_index import SegmentIndexEntry, encode_segment_index
from spark_kafka_backup.partition.writer import PartitionWriter

HERE = Path(__file__).resolve().parent

RECORDS = {
    "record_create_time": Record(42, 0, 1_700_000_000_123, b"k", b"v"),
    "record_log_append_time": Record(43, 1, 1_700_000_000_456, b"key", b"value"),
    "record_create_time_null": Record(44, -2, None, b"k", b"v"),
    "record_no_timestamp_null_key_empty_value": Record(45, -1, None, None, b""),
    "record_headers_duplicate_utf8": Record(
        46,
        0,
        -1,
        b"",
        None,
        (("dup", b"1"), ("dup", None), ("ключ", b""), ("", b"x"), ("dup", b"3")),
    ),
    "record_large_offset": Record(2**62 + 5, 0, -(2**63), b"\x00\xff", b"\xff\x00"),
}

TOPIC_RECORDS = [
    Record(12_345_678_901, 0, 1_700_000_000_000, b"a", b"first"),
    Record(12_345_678_903, 1, 1_700_000_000_500, None, b"after a gap of one"),
    Record(12_345_678_904, -2, None, b"c", None, (("h", b"1"), ("h", None))),
    Record(12_345_679_000, -1, None, b"", b"", ()),
]

# The record shapes the original tool's own tests pin (see formats/records.md): no timestamps, a null key and
# value, an empty header key, a null header value, offsets with gaps. One segment, named from offset 0.
_PLAIN = Record(0, -1, None, b"test-key", b"test-value")
SHAPES_RECORDS = [
    _PLAIN,
    Record(1, -1, None, None, None),
    Record(3, -1, None, b"test-key", b"test-value", (("", b""), ("null", None), ("value", b"test-value"))),
    _PLAIN._replace(offset=10),
]

# Index files with nothing behind them, for the index tools and the decoders' tests.
PARTITION_INDEX = [PartitionIndexEntry(f"s{start}", start) for start in (0, 100, 200, 300)]
SEGMENT_INDEX = [SegmentIndexEntry(0, 1, 10), SegmentIndexEntry(1, 11, 10), SegmentIndexEntry(5, 21, 15),
                 SegmentIndexEntry(6, 36, 10)]  # fmt: skip


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def record_json(record: Record) -> dict[str, object]:
    return {
        "offset": record.offset,
        "timestampTypeId": record.timestamp_type,
        "timestamp": record.timestamp,
        "key": b64(record.key),
        "value": b64(record.value),
        "headers": [[key, b64(value)] for key, value in record.headers],
    }


def main() -> None:
    manifest: dict[str, object] = {"records": {}, "topics": {}}
    records_dir = HERE / "records"
    shutil.rmtree(records_dir, ignore_errors=True)
    records_dir.mkdir()
    for name, record in RECORDS.items():
        (records_dir / name).write_bytes(encode_record(record))
        manifest["records"][name] = record_json(record)  # type: ignore[index]

    topic_dir = HERE / "backup" / "vectors-topic"
    shutil.rmtree(HERE / "backup", ignore_errors=True)
    # Partition 1234 with 11-digit offsets, segments rolling after every 2nd record.
    with PartitionWriter(topic_dir, "vectors-topic", 1234, max_segment_size=80, fsync=False) as writer:
        for record in TOPIC_RECORDS:
            writer.append(record)
    (topic_dir / "consumer_offsets_partition_1234").write_bytes(
        encode_consumer_offsets({"zeta": 12_345_679_001, "alpha": 12_345_678_903})
    )
    # Partition 7: empty, with the empty segment spark-kafka-backup gives an empty partition.
    with PartitionWriter(topic_dir, "vectors-topic", 7, fsync=False) as writer:
        writer.ensure_segment(500)
    shapes_dir = HERE / "backup" / "shapes-topic"
    with PartitionWriter(shapes_dir, "shapes-topic", 0, fsync=False) as writer:
        for record in SHAPES_RECORDS:
            writer.append(record)

    indexes_dir = HERE / "indexes"
    shutil.rmtree(indexes_dir, ignore_errors=True)
    indexes_dir.mkdir()
    (indexes_dir / "partition_index_four_segments").write_bytes(encode_partition_index(PARTITION_INDEX))
    (indexes_dir / "segment_index_without_records").write_bytes(encode_segment_index(SEGMENT_INDEX))
    manifest["indexes"] = {
        "partition_index_four_segments": [[entry.name, entry.start_offset] for entry in PARTITION_INDEX],
        "segment_index_without_records": [list(entry) for entry in SEGMENT_INDEX],
    }
    manifest["topics"] = {
        "shapes-topic": {"0": {"records": [record_json(r) for r in SHAPES_RECORDS], "consumerOffsets": {}}},
        "vectors-topic": {
            "1234": {
                "records": [record_json(r) for r in TOPIC_RECORDS],
                "consumerOffsets": {"alpha": 12_345_678_903, "zeta": 12_345_679_001},
            },
            "7": {"records": [], "consumerOffsets": {}},
        },
    }
    manifest["files"] = sorted(
        str(path.relative_to(HERE)) for path in (HERE / "backup").rglob("*") if path.is_file()
    ) + sorted(str(path.relative_to(HERE)) for path in (*records_dir.iterdir(), *indexes_dir.iterdir()))
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
