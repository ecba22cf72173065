"""Regenerate kbackup's golden vectors and their manifest.

Run from the repository root: ``python formats/vectors/generate.py``. The
tests (``tests/test_vectors.py``) check that every file decodes to what
``manifest.json`` says and that encoding the manifest gives the file's bytes,
so a codec change that alters bytes fails until the vectors are regenerated
on purpose (and the format docs updated).
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

from kbackup.format.consumer_offsets import encode_consumer_offsets
from kbackup.format.record import Record, encode_record
from kbackup.partition.writer import PartitionWriter

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
    # Partition 7: empty, with the empty segment kbackup gives an empty partition.
    with PartitionWriter(topic_dir, "vectors-topic", 7, fsync=False) as writer:
        writer.ensure_segment(500)
    manifest["topics"] = {
        "vectors-topic": {
            "1234": {
                "records": [record_json(r) for r in TOPIC_RECORDS],
                "consumerOffsets": {"alpha": 12_345_678_903, "zeta": 12_345_679_001},
            },
            "7": {"records": [], "consumerOffsets": {}},
        }
    }
    manifest["files"] = sorted(
        str(path.relative_to(HERE)) for path in (HERE / "backup").rglob("*") if path.is_file()
    ) + sorted(str(path.relative_to(HERE)) for path in records_dir.iterdir())
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
