"""Where catalog documents live and how they are replaced (atomically)."""

from __future__ import annotations

from spark_kafka_backup.catalog.model import PartitionCatalog
from spark_kafka_backup.errors import FormatError
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


def read_catalog(root: Location, topic: str, partition: int) -> PartitionCatalog | None:
    path = catalog_path(root, topic, partition)
    if not exists(path):
        return None
    catalog = PartitionCatalog.decode(read_limited(path, MAX_CATALOG_BYTES), file=str(path))
    if (catalog.topic, catalog.partition) != (topic, partition):
        raise FormatError(
            "a catalog of another partition", file=str(path), expected=f"topic {topic!r} partition {partition}",
            found=f"topic {catalog.topic!r} partition {catalog.partition}",
        )  # fmt: skip
    return catalog


def write_catalog(root: Location, catalog: PartitionCatalog, *, sync: bool = True) -> None:
    """Replace the partition's catalog whole: readers see the old one or the new one."""
    write_whole(catalog_path(root, catalog.topic, catalog.partition), catalog.encode(), sync=sync)
