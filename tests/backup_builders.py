"""Building backups in tests the way the original kafka-backup tool wrote them."""

from __future__ import annotations

from pathlib import Path

from spark_kafka_backup.format.magic import MAGIC_V1
from spark_kafka_backup.format.partition_index import PartitionIndexEntry, encode_partition_index
from spark_kafka_backup.format.record import Record, encode_record
from spark_kafka_backup.format.segment_index import SegmentIndexEntry, encode_segment_index


def write_original_style(topic_dir: Path, partition: int, segments: list[list[Record]]) -> None:
    """Write files the way the original tool does: the first segment is named
    ``from_offset_0000000000`` (start 0 in the partition index) whatever its
    first record; later segments after their first record."""
    topic_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    for number, records in enumerate(segments):
        start = 0 if number == 0 else records[0].offset
        prefix = f"segment_partition_{partition:03d}_from_offset_{start:010d}"
        data = bytearray(MAGIC_V1)
        index = []
        for record in records:
            encoded = encode_record(record)
            index.append(SegmentIndexEntry(record.offset, len(data), len(encoded)))
            data += encoded
        (topic_dir / f"{prefix}_records").write_bytes(bytes(data))
        (topic_dir / f"{prefix}_index").write_bytes(encode_segment_index(index))
        entries.append(PartitionIndexEntry(prefix, start))
    (topic_dir / f"index_partition_{partition:03d}").write_bytes(encode_partition_index(entries))
