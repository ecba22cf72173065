"""Where catalog documents live and how they are replaced (atomically)."""

from __future__ import annotations

from pathlib import Path

from kbackup.catalog.model import PartitionCatalog
from kbackup.fsutil import atomic_write, read_limited

CATALOG_DIR = Path(".kbackup") / "catalog"


def catalog_path(root: Path, topic: str, partition: int) -> Path:
    return root / CATALOG_DIR / topic / f"partition_{partition:03d}.json"


def read_catalog(root: Path, topic: str, partition: int) -> PartitionCatalog | None:
    path = catalog_path(root, topic, partition)
    if not path.exists():
        return None
    return PartitionCatalog.decode(read_limited(path, 1 << 30), file=str(path))


def write_catalog(root: Path, catalog: PartitionCatalog) -> None:
    """Replace the partition's catalog whole: readers see the old one or the new one."""
    path = catalog_path(root, catalog.topic, catalog.partition)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, catalog.encode())
