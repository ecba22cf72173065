"""Whether this process runs from a packed environment (``spark-kafka-backup pack``, shipped with ``--archive``):
a leaf module that executor code and the packer both import (:mod:`spark_kafka_backup.packing` is the driver's)."""

from __future__ import annotations

from pathlib import Path

#: The directory the archive unpacks to in each executor's working directory (``spark.archives``'s ``#`` fragment).
ENV_NAME = "kbackup-env"


def packed_environment() -> Path | None:
    """The packed environment this spark-kafka-backup was imported from, or None (an installed one)."""
    package = Path(__file__).resolve().parent
    site = package.parent
    return site.parent if site.name == "site-packages" and site.parent.name == ENV_NAME else None
