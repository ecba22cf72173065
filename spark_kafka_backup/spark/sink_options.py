"""The options of the ``kbackup_v1`` sink, parsed and checked: what its tasks and its commit are told.

Pure: both the sink and the ``kbackup_kafka`` source (which writes the files itself when given ``writeTo``) parse
them here, on the driver, and executors get them inside what Spark pickles.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from spark_kafka_backup.errors import UsageError
from spark_kafka_backup.fsutil import parse_umask
from spark_kafka_backup.partition.records_file import COMPRESSIONS, load_key
from spark_kafka_backup.partition.writer import DEFAULT_MAX_SEGMENT_SIZE
from spark_kafka_backup.storage import Location, parse_location

SINK_NAME = "kbackup_v1"


@dataclass(frozen=True)
class SinkOptions:
    target: Location
    max_segment_size: int = DEFAULT_MAX_SEGMENT_SIZE
    lock_timeout: float = 600
    fsync: bool = True
    #: The umask of the files the tasks create (None: the executor's own plus spark-kafka-backup's default).
    umask: int | None = None
    #: The job's ``--log-format`` for the batch lines the sink logs on the driver (None: text).
    log_format: str | None = None
    #: A directory on the driver's machine where each committed batch leaves ``batch-N.json`` (records and bytes
    #: written per topic, records read) for the job's report and metrics (:mod:`spark_kafka_backup.backup.metrics`),
    #: which consume them.
    stats_dir: Path | None = None
    #: Codec of finished segments' records files (None: plain v1, readable by the original tool).
    compression: str | None = None
    encryption_key_file: str | None = None
    encryption_key_env: str | None = None
    #: Behind Spark's Kafka source: record gaps below the log start as lost at the source and refuse another
    #: incarnation of a topic, asking the cluster these client settings reach (``kafka.*`` options).
    check_source: bool = False
    client: dict[str, str] = field(default_factory=dict)
    #: Report the schema ids (the schema registry's wire format) the keys and values written name (``schemaIds``:
    #: a backup with ``--schema-registry``, :mod:`spark_kafka_backup.schema_registry.seen_ids`).
    schema_ids: bool = False

    def encryption_key(self) -> bytes | None:
        """The key-encryption key, read where this runs (an executor), or ``None`` without encryption."""
        if self.encryption_key_file is None and self.encryption_key_env is None:
            return None
        return load_key(file=self.encryption_key_file, env=self.encryption_key_env)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        known = {
            "path", "maxsegmentsize", "locktimeoutseconds", "fsync", "umask", "checkpointlocation", "queryname",
            "logformat", "statsdir", "compression", "encryptionkeyfile", "encryptionkeyenv",
        }  # fmt: skip
        known.update(("checksource", "schemaids"))
        lowered = {key.lower(): value for key, value in options.items()}
        client = {key[len("kafka.") :]: value for key, value in options.items() if key.lower().startswith("kafka.")}
        for key in options:
            if key.lower() not in known and not key.lower().startswith("kafka."):
                raise UsageError(f"unknown option {key!r} for the {SINK_NAME} sink")
        if not lowered.get("path"):
            raise UsageError(f"the {SINK_NAME} sink needs a path: writeStream...start(PATH)")
        compression = lowered.get("compression", "none").lower()
        if compression not in COMPRESSIONS:
            codecs = ", ".join(COMPRESSIONS)
            raise UsageError(f"the {SINK_NAME} sink's compression is one of {codecs}, not {compression!r}")
        try:
            return cls(
                target=parse_location(lowered["path"]),
                max_segment_size=int(lowered.get("maxsegmentsize", DEFAULT_MAX_SEGMENT_SIZE)),
                lock_timeout=float(lowered.get("locktimeoutseconds", 600)),
                fsync=lowered.get("fsync", "true").lower() != "false",
                umask=parse_umask(lowered["umask"]) if "umask" in lowered else None,
                log_format=lowered.get("logformat"),
                stats_dir=Path(lowered["statsdir"]) if lowered.get("statsdir") else None,
                compression=None if compression == "none" else compression,
                encryption_key_file=lowered.get("encryptionkeyfile") or None,
                encryption_key_env=lowered.get("encryptionkeyenv") or None,
                check_source=lowered.get("checksource", "false").lower() == "true",
                client=client,
                schema_ids=lowered.get("schemaids", "false").lower() == "true",
            )
        except ValueError as exc:
            raise UsageError(f"invalid option for the {SINK_NAME} sink: {exc}") from exc
