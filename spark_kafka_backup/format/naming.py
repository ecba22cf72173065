"""File names of a v1 backup.

A backup root holds one directory per topic, named like the topic. Inside it,
per partition ``P`` and segment start offset ``N``::

    segment_partition_PPP_from_offset_NNNNNNNNNN_records
    segment_partition_PPP_from_offset_NNNNNNNNNN_index
    index_partition_PPP
    consumer_offsets_partition_PPP

``PPP`` is the partition zero-padded to at least 3 digits and ``NNNNNNNNNN``
the offset zero-padded to at least 10: partition 1234 is written ``1234`` and
offset 12345678901 is written in full. Names are parsed leniently (any
number of digits), as the original's reader does.

``spark-kafka-backup merge`` writes a segment that replaces several under a name of its
own, ``segment_partition_PPP_from_offset_NNNNNNNNNN_merged_G_records`` (and
``_index``), ``G`` counting merges of that start offset from 1, because the
first segment it replaces still has the plain name until the partition index
switches over. The original reads such a segment like any other: it opens the
name the partition index gives.

Names read from a backup (JSON state, partition indexes) are checked against this grammar before they touch a
file system or an object store (:func:`check_topic_name`, :func:`check_partition`, :func:`check_segment_name`):
a name that could leave its directory (``..``, a separator, an absolute path) is a :class:`FormatError`.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from spark_kafka_backup.errors import FormatError

RECORDS_SUFFIX = "_records"
INDEX_SUFFIX = "_index"

_SEGMENT = re.compile(r"segment_partition_([0-9]+)_from_offset_([0-9]+)(?:_merged_([1-9][0-9]*))?_(records|index)")
_PARTITION_INDEX = re.compile(r"index_partition_([0-9]+)")
_CONSUMER_OFFSETS = re.compile(r"consumer_offsets_partition_([0-9]+)")

#: Kafka's topic name grammar: what a topic directory may be named (``.`` and ``..`` are not topics).
_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
TOPIC_GRAMMAR = "1 to 249 characters of [a-zA-Z0-9._-], not . or .."
#: The highest partition number Kafka has (an int32).
MAX_PARTITION = 2**31 - 1
# Control characters (a NUL among them) have no place in a file name a listing or an error line shows.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
#: The longest segment name (its file names add a suffix; most file systems allow 255 bytes).
MAX_SEGMENT_NAME = 240


def is_topic_name(name: object) -> bool:
    """Whether ``name`` is a legal Kafka topic name, and so a safe directory name."""
    return isinstance(name, str) and _TOPIC.fullmatch(name) is not None and name not in (".", "..")


def check_topic_name(name: object, *, file: str, what: str = "topic name") -> str:
    """``name`` if it is a legal Kafka topic name, else a FormatError naming ``file``."""
    if not is_topic_name(name):
        raise FormatError(f"{what} is not a Kafka topic name", file=file, expected=TOPIC_GRAMMAR, found=repr(name))
    return str(name)


def check_partition(value: object, *, file: str) -> int:
    """``value`` as a partition number (an integer 0..2^31-1, not a boolean), else a FormatError naming ``file``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_PARTITION:
        raise FormatError("not a partition number", file=file, expected=f"an integer 0..{MAX_PARTITION}",
                          found=repr(value)[:80])  # fmt: skip
    return value


def is_segment_name(name: object) -> bool:
    """Whether ``name`` is a plain file name prefix in a topic directory (the format allows any such name; the
    original's test index uses ``s0``): no separator, no control character, not ``.`` or ``..``."""
    return (
        isinstance(name, str)
        and 0 < len(name.encode("utf-8", "surrogatepass")) <= MAX_SEGMENT_NAME
        and name not in (".", "..")
        and not any(c in name for c in "/\\")
        and _CONTROL.search(name) is None
    )


def check_segment_name(name: object, *, file: str, what: str = "segment name") -> str:
    """``name`` if it is a plain segment file prefix (:func:`is_segment_name`), else a FormatError naming ``file``."""
    if not is_segment_name(name):
        raise FormatError(f"{what} names no file in the topic directory", file=file,
                          expected="a plain segment file prefix", found=repr(name)[:300])  # fmt: skip
    return str(name)


def partition_segments_prefix(partition: int) -> str:
    """The start every name of the partition's segment files shares (and no other partition's)."""
    return f"segment_partition_{partition:03d}_from_offset_"


def segment_prefix(partition: int, start_offset: int, generation: int = 0) -> str:
    """The name shared by a segment's two files, as stored in the partition index (``generation`` > 0: the
    segment written by that many merges of segments starting at ``start_offset``)."""
    merged = f"_merged_{generation}" if generation else ""
    return f"{partition_segments_prefix(partition)}{start_offset:010d}{merged}"


def rewritten_name(partition: int, name: str, start_offset: int) -> str:
    """The name of a segment rewritten in place of ``name`` (merged with the segments after it, or rewritten without
    erased records): the next generation at the same start offset, so it never takes an existing segment's name."""
    parsed = parse_segment_file_name(name + RECORDS_SUFFIX)
    generation = parsed.generation + 1 if parsed is not None and parsed.partition == partition else 1
    return segment_prefix(partition, start_offset, generation)


def partition_index_file_name(partition: int) -> str:
    return f"index_partition_{partition:03d}"


def consumer_offsets_file_name(partition: int) -> str:
    return f"consumer_offsets_partition_{partition:03d}"


class SegmentFileName(NamedTuple):
    """A parsed segment file name."""

    partition: int
    start_offset: int
    kind: str  # "records" or "index"
    generation: int = 0  # > 0 for a segment written by spark-kafka-backup merge or erase


def parse_segment_file_name(name: str) -> SegmentFileName | None:
    """Parse a segment file name; ``None`` if ``name`` is not one."""
    match = _SEGMENT.fullmatch(name)
    if match is None:
        return None
    return SegmentFileName(int(match[1]), int(match[2]), match[4], int(match[3] or 0))


def parse_partition_index_file_name(name: str) -> int | None:
    """The partition of a partition index file name; ``None`` if it is not one."""
    match = _PARTITION_INDEX.fullmatch(name)
    return int(match[1]) if match else None


def parse_consumer_offsets_file_name(name: str) -> int | None:
    """The partition of a consumer offsets file name; ``None`` if it is not one."""
    match = _CONSUMER_OFFSETS.fullmatch(name)
    return int(match[1]) if match else None
