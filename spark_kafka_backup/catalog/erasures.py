"""The record of offsets erased on purpose: what ``spark-kafka-backup erase`` took out of a partition.

One JSON document per partition, beside its catalog, replaced whole (atomically) by each erase that removes
records from it::

    STATE/catalog/<topic>/partition_PPP.erased.json
    {"version": 1, "topic": "orders", "partition": 3, "records": 42, "updatedAt": 1795334400000,
     "erased": [[1200, 1200], [1305, 1307], ...]}

``erased`` are the offsets (ranges, inclusive) whose records were erased; ``records`` how many records that was in
all. It holds offsets only: never a key, a value or the predicate that chose them (an erasure leaves no trace of
what it erased). ``ls``, ``describe``, the report and ``verify`` show these offsets as erased, neither damage nor
lost at the source; ``verify`` checks that the backup holds none of them; the backup's writers pass over records
at these offsets when the source hands them again (:mod:`spark_kafka_backup.partition.erased`).
"""

from __future__ import annotations

import json
import time

from spark_kafka_backup.catalog.store import catalog_dir
from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.format.naming import check_partition, check_topic_name
from spark_kafka_backup.partition.erased import ErasedOffsets
from spark_kafka_backup.storage import Location, exists, read_document, write_whole

ERASED_VERSION = 1
#: The largest record read back (about 30 bytes per range).
MAX_RECORD_BYTES = 256 << 20


def erasure_path(root: Location, topic: str, partition: int) -> Location:
    return catalog_dir(root, topic) / f"partition_{partition:03d}.erased.json"


def read_erasure(root: Location, topic: str, partition: int) -> tuple[ErasedOffsets, int]:
    """The partition's erased offsets and how many records they held (empty and 0 when nothing was erased)."""
    path = erasure_path(root, topic, partition)
    if not exists(path):
        return ErasedOffsets(), 0
    file = str(path)
    document = read_document(path, MAX_RECORD_BYTES, what="erasure record")
    try:
        if not isinstance(document, dict) or document.get("version") != ERASED_VERSION:
            found = document.get("version") if isinstance(document, dict) else type(document).__name__
            raise FormatError("unsupported erasure record version", file=file, found=repr(found))
        if (check_topic_name(document["topic"], file=file), check_partition(document["partition"], file=file)) != (
            topic,
            partition,
        ):
            raise FormatError("an erasure record of another partition", file=file,
                              found=f"{document['topic']}/{document['partition']}")  # fmt: skip
        ranges = [(int(first), int(last)) for first, last in document["erased"]]
        records = int(document["records"])
    except FormatError:
        raise
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise FormatError(f"not a valid erasure record ({type(exc).__name__}: {exc})", file=file) from exc
    if any(first < 0 or last < first for first, last in ranges) or records < 0:
        raise FormatError("an erased range needs 0 <= first <= last", file=file)
    return ErasedOffsets.of(ranges), records


def read_erased(root: Location, topic: str, partition: int) -> ErasedOffsets:
    """The partition's erased offsets."""
    return read_erasure(root, topic, partition)[0]


def describe_erasure(records: int) -> str:
    """``"3 records erased on purpose"`` (empty when none were)."""
    if not records:
        return ""
    return f"{records} {'record' if records == 1 else 'records'} erased on purpose (spark-kafka-backup erase)"


def add_erasure(root: Location, topic: str, partition: int, erased: ErasedOffsets, records: int) -> None:
    """Record ``erased`` (``records`` records) as erased from the partition, with what was erased before (durable on
    return). Idempotent for one erase: recording the same offsets again changes neither the ranges nor the count."""
    known, known_records = read_erasure(root, topic, partition)
    merged = known.union(erased)
    if merged.ranges() == known.ranges():
        return
    total = known_records + records
    document = {
        "version": ERASED_VERSION,
        "topic": topic,
        "partition": partition,
        "records": total,
        "updatedAt": int(time.time() * 1000),
        "erased": [list(pair) for pair in merged.ranges()],
    }
    write_whole(erasure_path(root, topic, partition), json.dumps(document, separators=(",", ":")).encode() + b"\n")
