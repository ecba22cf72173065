"""The catalog's checksum of the newest segment's committed prefix (the "tail").

A finished segment is cataloged whole (:mod:`spark_kafka_backup.catalog.build`). The
newest segment keeps growing and, with large segments, may never finish: a
snapshot backup into 1 GiB segments leaves every partition's records in an
unfinished segment. So each writer that closes after syncing records the
prefix it committed: how many bytes of the records and index files, how many
records, and the CRC32C of each prefix (:class:`TailEntry`).

The writer extends the CRC32Cs incrementally (``crc32c(new bytes, previous)``)
instead of reading the files again: a committed byte changed since it was
recorded still shows, because the recorded checksum is of the bytes as they
were. Bytes past the prefix are a batch in flight, or a crash's leftovers the
next writer repairs; readers check the prefix and name what lies past it.

Order (crash safety): the records and index are fsynced before the catalog is
replaced (atomically), so a recorded prefix is always on disk. A crash between
the two leaves the catalog behind the files; the next writer extends from it.
"""

from __future__ import annotations

from dataclasses import replace

import crc32c

from spark_kafka_backup.catalog.model import PartitionCatalog
from spark_kafka_backup.catalog.store import read_catalog, write_catalog
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.naming import INDEX_SUFFIX, RECORDS_SUFFIX
from spark_kafka_backup.partition.ledger import TailEntry
from spark_kafka_backup.partition.records_file import NO_KEYS, open_records
from spark_kafka_backup.storage import Location, storage_for

CHUNK = 1 << 20


def record_tail(
    root: Location, topic: str, partition: int, tail: TailEntry, *, sync: bool = True, read_from: int | None = None
) -> None:
    """Replace the partition's recorded tail (the rest of its catalog unchanged); ``read_from`` is kept when the
    catalog does not know one yet (see :attr:`PartitionCatalog.read_from`)."""
    catalog = read_catalog(root, topic, partition, expected=True) or PartitionCatalog(topic, partition)
    known = catalog.read_from if catalog.read_from is not None else read_from
    if catalog.tail != tail or known != catalog.read_from:
        write_catalog(root, replace(catalog, tail=tail, read_from=known), sync=sync)


def prefix_crc32c(path: Location, length: int, keys: KeyRing = NO_KEYS) -> tuple[int, int]:
    """The CRC32C of the first ``length`` bytes of a file, and how many bytes it has (at most ``length``).

    The file's plain bytes: a records file compressed after its prefix was recorded (the segment finished, and the
    catalog names it as finished only a moment later) still holds the same plain prefix.
    """
    value = 0
    done = 0
    handle = open_records(path, keys)
    try:
        while done < length:
            chunk = handle.pread(min(CHUNK, length - done), done)
            if not chunk:
                break
            value = crc32c.crc32c(chunk, value)
            done += len(chunk)
    finally:
        handle.close()
    return value, done


def tail_problem(topic_dir: Location, tail: TailEntry, keys: KeyRing = NO_KEYS) -> str | None:
    """Why the newest segment's committed prefix is not what the catalog recorded, or ``None`` when it is (``keys``:
    those of a tail sealed since)."""
    for suffix, length, expected in (
        (RECORDS_SUFFIX, tail.records_bytes, tail.records_crc32c),
        (INDEX_SUFFIX, tail.index_bytes, tail.index_crc32c),
    ):
        path = topic_dir / f"{tail.name}{suffix}"
        if not storage_for(path).exists(path):
            return f"{path.name} is missing"
        found, size = prefix_crc32c(path, length, keys)
        if size < length:
            return f"{path.name} has {size} bytes, the catalog says {length} were committed"
        if found != expected:
            return (
                f"{path.name}: its first {length} bytes (committed) have CRC32C {found:#010x}, "
                f"the catalog says {expected:#010x}"
            )
    return None
