"""Where catalog documents live, how they are replaced (atomically), and the marker that says one was kept.

A partition's catalog is the only record of its segments' checksums, so losing the file must not quietly turn a
checked backup into an unchecked one. The first time a catalog is written for a partition, a marker goes beside the
catalog directory, just after it: ``STATE/cataloged/<topic>/partition_PPP`` (an empty file, never removed). After,
so that a kill between the two leaves a catalog without a marker (added at the next catalog write), never a marker
without a catalog where none had been written yet (a partition continued from the original tool's files, a rebuild).
A partition with segments and a marker but no catalog has lost its checksums: readers (``verify``, ``cat``, the
restore) report or refuse it, and the backup's writers refuse to go on and describe the files again as they are now
(:func:`missing_catalog`). A partition without a marker was never cataloged (the original tool's backups, a backup
copied without its state directory): it is read as the original's, structure checked only.
"""

from __future__ import annotations

from spark_kafka_backup.catalog.model import PartitionCatalog
from spark_kafka_backup.errors import BackupNotFoundError, DamagedBackupError, FormatError
from spark_kafka_backup.partition.layout import state_dir
from spark_kafka_backup.storage import Location, exists, read_limited, write_whole

#: The largest catalog read (about 150,000 segments of one partition): a larger file is not one spark-kafka-backup
#: wrote.
MAX_CATALOG_BYTES = 64 << 20


def catalog_dir(root: Location, topic: str) -> Location:
    """``STATE/catalog/<topic>`` (see :func:`spark_kafka_backup.partition.layout.state_dir`)."""
    return state_dir(root) / "catalog" / topic


def catalog_path(root: Location, topic: str, partition: int) -> Location:
    return catalog_dir(root, topic) / f"partition_{partition:03d}.json"


def cataloged_marker_path(root: Location, topic: str, partition: int) -> Location:
    """``STATE/cataloged/<topic>/partition_PPP``: exists once a catalog was written for the partition."""
    return state_dir(root) / "cataloged" / topic / f"partition_{partition:03d}"


#: Markers this process wrote or found, so a writer looks once per partition and process (kbackup never removes one).
_marked: set[Location] = set()


def missing_catalog(root: Location, topic: str, partition: int) -> str | None:
    """Why the partition's checksums are lost (its marker says a catalog was kept), else ``None`` (no marker).

    Call it for a partition that has segments and no catalog, or look for the catalog after calling it: the marker
    is written after the catalog, so a catalog missing after the marker was found is gone."""
    marker = cataloged_marker_path(root, topic, partition)
    if not exists(marker):
        return None
    return (
        f"its catalog {catalog_path(root, topic, partition)} is missing, though spark-kafka-backup kept one for it "
        f"({marker} says so): the checksums of its segments are lost, so nothing shows the files are intact (if they "
        f"are known to be good: spark-kafka-backup catalog rebuild {root} --topic {topic})"
    )


def catalog_lost(root: Location, topic: str, partition: int, *, catalog: object | None, has_segments: bool) -> bool:
    """Whether a partition read with ``catalog`` (None: not found) and ``has_segments`` has lost the catalog it had:
    damage, the checksums gone, not a backup that never had one (:func:`missing_catalog`)."""
    return catalog is None and has_segments and missing_catalog(root, topic, partition) is not None


#: How a listing (``ls``, ``describe``, the report) marks a partition whose catalog was kept and is lost.
LOST_CATALOG_NOTE = "DAMAGED: its catalog is lost, the checksums cannot be checked (spark-kafka-backup verify)"


def refuse_lost_catalog(root: Location, topic: str, partition: int) -> None:
    """Raise :class:`DamagedBackupError` when the partition's catalog was kept and is lost (:func:`missing_catalog`)."""
    problem = missing_catalog(root, topic, partition)
    if problem is not None:
        raise DamagedBackupError(f"topic {topic!r} partition {partition}: {problem}")


def read_catalog(root: Location, topic: str, partition: int, *, expected: bool = False) -> PartitionCatalog | None:
    """The partition's catalog, ``None`` when it has none. ``expected``: the caller has segments of the partition
    to record or check, so a catalog lost after one was kept raises :class:`DamagedBackupError`."""
    path = catalog_path(root, topic, partition)
    try:
        data = read_limited(path, MAX_CATALOG_BYTES)  # not asked whether it exists first: a request less on a store
    except BackupNotFoundError:
        if exists(path):
            raise  # something there that is not a file (a directory)
        if expected:
            refuse_lost_catalog(root, topic, partition)
        return None
    if not data and not exists(cataloged_marker_path(root, topic, partition)):
        # A placeholder's first catalog, written unsynced and unmarked (write_catalog(sync=False)), that a power
        # loss left empty: never kept, so none (the next write replaces it).
        return None
    catalog = PartitionCatalog.decode(data, file=str(path))
    if (catalog.topic, catalog.partition) != (topic, partition):
        raise FormatError(
            "a catalog of another partition", file=str(path), expected=f"topic {topic!r} partition {partition}",
            found=f"topic {catalog.topic!r} partition {catalog.partition}",
        )  # fmt: skip
    return catalog


def write_catalog(root: Location, catalog: PartitionCatalog, *, sync: bool = True) -> None:
    """Replace the partition's catalog whole: readers see the old one or the new one. The partition's marker is
    written after it, the first time.

    ``sync=False`` (placeholders prepared many at once): neither fsynced nor marked; the caller makes the catalogs
    durable with one file-system sync and then calls :func:`mark_cataloged` (a marker must never be durable before
    its catalog's bytes are)."""
    write_whole(catalog_path(root, catalog.topic, catalog.partition), catalog.encode(), sync=sync)
    if sync:
        mark_cataloged(root, catalog.topic, catalog.partition)


def mark_cataloged(root: Location, topic: str, partition: int, *, sync: bool = True) -> None:
    """Write the partition's marker (once a durable catalog exists), unless this process wrote or saw it."""
    marker = cataloged_marker_path(root, topic, partition)
    if marker not in _marked:
        if not exists(marker):
            write_whole(marker, b"", sync=sync)
        _marked.add(marker)
