"""Backups as Spark data: ``spark.read.format("kbackup")`` (see :mod:`spark_kafka_backup.datasource.source`)."""

from spark_kafka_backup.datasource.source import FORMAT, register

__all__ = ["FORMAT", "register"]
