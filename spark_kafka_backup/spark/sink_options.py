"""The options of the ``kbackup_v1`` sink, parsed and checked: what its tasks and its commit are told.

Pure: both the sink and the ``kbackup_kafka`` source (which writes the files itself when given ``writeTo``) parse
them here, on the driver, and executors get them inside what Spark pickles.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spark_kafka_backup.errors import UsageError
from spark_kafka_backup.fsutil import parse_umask
from spark_kafka_backup.partition.records_file import COMPRESSIONS, load_key
from spark_kafka_backup.partition.writer import DEFAULT_MAX_SEGMENT_SIZE
from spark_kafka_backup.storage import Location, parse_location

SINK_NAME = "kbackup_v1"


@dataclass(frozen=True)
class SinkOptions:
    """How a backup's files are written: one typed object on each side of the Spark boundary. The job builds it
    (``BackupSettings.files``), :meth:`options` turns it into the string options Spark carries, and :meth:`parse`
    (the inverse) rebuilds it where the files are written; checked once, in ``__post_init__``, whichever way it was
    made. An option is one field here and one row of :data:`_OPTIONS`."""

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
    #: Codec of finished segments' records files (None: plain v1, readable by the original tool; "none" is only a
    #: spelling of the command line and of the string option).
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

    def __post_init__(self) -> None:
        if self.compression is not None and self.compression not in COMPRESSIONS[1:]:
            codecs = ", ".join(COMPRESSIONS)
            raise UsageError(f"the {SINK_NAME} sink's compression is one of {codecs}, not {self.compression!r}")
        if self.max_segment_size <= 0:
            raise UsageError(f"the {SINK_NAME} sink's maxSegmentSize must be positive, not {self.max_segment_size}")

    @property
    def encrypted(self) -> bool:
        return self.encryption_key_file is not None or self.encryption_key_env is not None

    def encryption_key(self) -> bytes | None:
        """The key-encryption key, read where this runs (an executor), or ``None`` without encryption."""
        if not self.encrypted:
            return None
        return load_key(file=self.encryption_key_file, env=self.encryption_key_env)

    def options(self) -> dict[str, str]:
        """The string options of the sink (``path`` among them) that :meth:`parse` turns back into ``self``."""
        found = {option: write(getattr(self, name)) for name, option, write, _ in _OPTIONS}
        found.update({f"kafka.{key}": value for key, value in self.client.items()})
        return {option: text for option, text in found.items() if text is not None}

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        lowered = {key.lower(): value for key, value in options.items()}
        client = {key[len("kafka.") :]: value for key, value in options.items() if key.lower().startswith("kafka.")}
        known = {option.lower() for _, option, _, _ in _OPTIONS} | _SPARKS_OWN
        for key in options:
            if key.lower() not in known and not key.lower().startswith("kafka."):
                raise UsageError(f"unknown option {key!r} for the {SINK_NAME} sink")
        if not lowered.get("path"):
            raise UsageError(f"the {SINK_NAME} sink needs a path: writeStream...start(PATH)")
        try:
            values = {
                name: read(lowered[option.lower()]) for name, option, _, read in _OPTIONS if option.lower() in lowered
            }
        except ValueError as exc:
            raise UsageError(f"invalid option for the {SINK_NAME} sink: {exc}") from exc
        return cls(**values, client=client)


def _optional(text: str) -> str | None:
    return text or None


def _text(value: object) -> str | None:
    return None if value is None else str(value)


def _path(text: str) -> Path | None:
    return Path(text) if text else None


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _codec(text: str) -> str | None:
    lowered = text.lower()
    return None if lowered == "none" else lowered


#: Each option: (field, option name, field -> text (None: left out), text -> field value).
_OPTIONS: tuple[tuple[str, str, Callable[[Any], str | None], Callable[[str], Any]], ...] = (
    ("target", "path", str, parse_location),
    ("max_segment_size", "maxSegmentSize", str, int),
    ("lock_timeout", "lockTimeoutSeconds", str, float),
    ("fsync", "fsync", _flag, lambda text: text.lower() != "false"),
    ("umask", "umask", lambda umask: None if umask is None else f"{umask:03o}", parse_umask),
    ("log_format", "logFormat", _text, _optional),
    ("stats_dir", "statsDir", _text, _path),
    ("compression", "compression", lambda codec: codec or "none", _codec),
    ("encryption_key_file", "encryptionKeyFile", _text, _optional),
    ("encryption_key_env", "encryptionKeyEnv", _text, _optional),
    ("check_source", "checkSource", _flag, lambda text: text.lower() == "true"),
    ("schema_ids", "schemaIds", _flag, lambda text: text.lower() == "true"),
)  # fmt: skip
#: Options Spark itself adds to a sink's.
_SPARKS_OWN = frozenset({"checkpointlocation", "queryname"})
