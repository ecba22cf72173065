"""Reading and atomically replacing a partition's consumer offsets file."""

from __future__ import annotations

from collections.abc import Mapping

from spark_kafka_backup.format.consumer_offsets import MAX_FILE_SIZE, decode_consumer_offsets, encode_consumer_offsets
from spark_kafka_backup.partition.layout import consumer_offsets_path
from spark_kafka_backup.storage import Location, exists, read_limited, write_whole


def read_consumer_offsets(topic_dir: Location, partition: int) -> dict[str, int]:
    """The stored ``{group: committed offset}``; empty when no file exists."""
    path = consumer_offsets_path(topic_dir, partition)
    if not exists(path):
        return {}
    return decode_consumer_offsets(read_limited(path, MAX_FILE_SIZE), file=str(path))


def write_consumer_offsets(
    topic_dir: Location, partition: int, offsets: Mapping[str, int], *, sync: bool = True
) -> None:
    """Replace the file whole: a reader sees the old content or the new, never a mix."""
    write_whole(consumer_offsets_path(topic_dir, partition), encode_consumer_offsets(offsets), sync=sync)
