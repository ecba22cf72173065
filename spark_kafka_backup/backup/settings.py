"""The backup job's settings, from command-line flags and the original tool's files.

Accepted, and checked before Spark starts (unknown keys, conflicts, missing
values and bad numbers are one-line errors):

- the original ``backup-standalone.sh`` flags: ``--bootstrap-server``,
  ``--target-dir``, ``--topics``, ``--topics-regex``, ``--max-segment-size``,
  ``--command-config FILE`` (Java client settings for SSL/SASL), ``--snapshot``,
  ``--debug``;
- the original sink connector's properties, from ``--properties FILE``:
  ``target.dir``, ``topics``, ``topics.regex``, ``max.segment.size.bytes``,
  ``snapshot``, ``cluster.*`` (Kafka client settings) and the Kafka Connect
  boilerplate (``name``, ``connector.class``, ``tasks.max``, ``*.converter``),
  which is ignored;
- spark-kafka-backup's own flags (see ``--help``).

A flag and a property that set the same thing must agree.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spark_kafka_backup.argtypes import positive_float, positive_int
from spark_kafka_backup.arguments import (
    add_encryption_flags,
    add_schema_registry_flags,
    encryption_key_source,
    schema_registry_address,
)
from spark_kafka_backup.errors import UsageError
from spark_kafka_backup.job_options import Monitoring, job_parser, spark_conf
from spark_kafka_backup.kafka.connector_config import ConnectorProperties, client_settings, java_client_settings
from spark_kafka_backup.kafka.topics import TopicSelection
from spark_kafka_backup.partition.layout import STATE_DIR, state_dir
from spark_kafka_backup.partition.records_file import COMPRESSIONS
from spark_kafka_backup.partition.writer import DEFAULT_MAX_SEGMENT_SIZE
from spark_kafka_backup.schema_registry.client import RegistryAddress
from spark_kafka_backup.spark.sink_options import SinkOptions
from spark_kafka_backup.storage import Location, as_local, parse_location

#: Where the job keeps Spark's checkpoint and its own state inside the backup root.
STATE_DIR_NAME = STATE_DIR

_PROPERTY_KEYS = {"target.dir", "topics", "topics.regex", "max.segment.size.bytes", "snapshot"}

#: ``--kafka-source``: the Python source, or Spark's own JVM source (``spark-sql-kafka-0-10``).
KAFKA_SOURCES = ("python", "spark")
DEFAULT_KAFKA_SOURCE = "python"
#: The Python source's name before the project was renamed, still taken so that a running backup's command line
#: keeps working.
_OLD_SOURCE_NAMES = {"kbackup": "python"}


def _kafka_source(text: str) -> str:
    return _OLD_SOURCE_NAMES.get(text, text)


@dataclass(frozen=True)
class BackupSettings:
    """Everything the backup job needs, checked."""

    #: How the files are written (the backup root, segment size, compression, key, the schema ids to report): the
    #: one object that crosses to the executors writing them (as string options, :meth:`SinkOptions.options`).
    files: SinkOptions
    client: dict[str, str]
    selection: TopicSelection
    java_client: dict[str, str] = field(default_factory=dict)
    kafka_source: str = DEFAULT_KAFKA_SOURCE
    snapshot: bool = False
    checkpoint_location: Path | None = None
    offsets_interval: float = 60.0
    trigger_interval: float = 10.0
    max_offsets_per_trigger: int | None = None
    prune_groups: bool = False
    #: ``--accept-source-loss``: a snapshot that found offsets deleted at the source before it read them exits 0.
    accept_source_loss: bool = False
    #: ``--schema-registry``: the registry captured into the backup beside the records.
    schema_registry: RegistryAddress | None = None
    #: ``--schema-registry-interval``: seconds between captures of a continuous backup (None: ``offsets_interval``).
    schema_registry_interval: float | None = None
    debug: bool = False
    spark_conf: dict[str, str] = field(default_factory=dict)
    #: ``--umask``; None: the inherited one plus :data:`spark_kafka_backup.fsutil.DEFAULT_UMASK`.
    umask: int | None = None
    #: ``--metrics-*`` and ``--log-format``.
    monitoring: Monitoring = field(default_factory=Monitoring)

    @property
    def target(self) -> Location:
        return self.files.target

    @property
    def checkpoint(self) -> Path:
        if self.checkpoint_location is not None:
            return self.checkpoint_location
        if not isinstance(self.target, Path):
            raise UsageError(f"a backup to {self.target} needs a local --checkpoint-location DIR for Spark's state")
        return as_local(state_dir(self.target)) / "spark-checkpoint"


def build_parser(prog: str = "spark-submit jobs/backup.py") -> argparse.ArgumentParser:
    parser, original, own = job_parser(prog, "backup")
    original.add_argument("--target-dir", help="the backup root: one directory per topic is written inside")
    original.add_argument("--topics", help="comma-separated topics to back up")
    original.add_argument("--topics-regex", help="back up every topic whose whole name matches this regex")
    original.add_argument("--max-segment-size", type=positive_int, help="roll segments above this many bytes")
    original.add_argument("--snapshot", action="store_true", help="back up what exists now, then exit")
    own.add_argument(
        "--checkpoint-location",
        type=Path,
        help=f"Spark checkpoint directory (default: TARGET/{STATE_DIR_NAME}/spark-checkpoint; "
        "required when TARGET is on an object store)",
    )
    own.add_argument(
        "--offsets-interval",
        type=positive_float,
        default=60.0,
        help="seconds between consumer group offset rounds (default 60)",
    )
    own.add_argument(
        "--trigger-interval",
        type=positive_float,
        default=10.0,
        help="seconds between micro-batches in continuous mode (default 10)",
    )
    own.add_argument(
        "--compression",
        choices=COMPRESSIONS,
        default="none",
        type=str.lower,
        help="store finished segments' records files compressed (zstd, lz4, gzip) in frames read one at a time; "
        "none (default) keeps the original tool's plain files (formats/compressed-records.md)",
    )
    add_encryption_flags(own, purpose="seals finished segments with AES-256-GCM (each under its own data key)")
    own.add_argument(
        "--lock-timeout",
        type=positive_float,
        default=600.0,
        metavar="SECONDS",
        help="how long a task waits for a partition another writer holds (a second backup of the target) before it "
        "fails (default 600)",
    )
    own.add_argument(
        "--max-records-per-trigger",
        "--max-offsets-per-trigger",
        dest="max_offsets_per_trigger",
        type=positive_int,
        metavar="RECORDS",
        help="at most this many offsets per micro-batch, over all partitions (Spark's maxOffsetsPerTrigger)",
    )
    own.add_argument(
        "--kafka-source",
        type=_kafka_source,
        choices=KAFKA_SOURCES,
        default=DEFAULT_KAFKA_SOURCE,
        help=f"read Kafka with the Python source or Spark's own (needs spark-submit --packages "
        f"org.apache.spark:spark-sql-kafka-0-10_2.13:VERSION); default {DEFAULT_KAFKA_SOURCE}",
    )
    own.add_argument(
        "--accept-source-loss",
        action="store_true",
        help="let a snapshot exit 0 when the source deleted records (retention) before it could read them; they are "
        "recorded in the backup and named either way (default: the snapshot exits 1 naming them)",
    )
    own.add_argument(
        "--prune-groups",
        action="store_true",
        help="drop groups that no longer exist on the cluster from the stored consumer offsets",
    )
    registry = parser.add_argument_group("schema registry (docs/schema-registry.md)")
    add_schema_registry_flags(
        registry,
        purpose="to back up beside the topics: subjects, versions, ids, compatibility levels (at the start, with "
        "every offset round, at the end of a snapshot)",
    )
    registry.add_argument(
        "--schema-registry-interval",
        type=positive_float,
        metavar="SECONDS",
        help="seconds between captures of the registry in a continuous backup (default: --offsets-interval); each "
        "costs three requests per subject",
    )
    return parser


def parse_backup_args(argv: Sequence[str], *, prog: str = "spark-submit jobs/backup.py") -> BackupSettings:
    """Parse and check; raise :class:`UsageError` for anything wrong (argparse exits for bad flags)."""
    args = build_parser(prog).parse_args(argv)
    properties = ConnectorProperties.load(args.properties, _PROPERTY_KEYS)
    target = properties.required(
        "--target-dir", args.target_dir, "target.dir",
        missing="the backup needs a target directory: --target-dir DIR (or target.dir in --properties)",
    )  # fmt: skip
    topics = properties.merge("--topics", args.topics, "topics")
    regex = properties.merge("--topics-regex", args.topics_regex, "topics.regex")
    if topics and regex:
        raise UsageError("give topics or a topics regex, not both")
    if not topics and not regex:
        raise UsageError("say what to back up: --topics LIST or --topics-regex REGEX")
    selection = TopicSelection.from_list(topics) if topics else TopicSelection(pattern=regex)

    max_segment_size = properties.positive(
        "--max-segment-size", args.max_segment_size, "max.segment.size.bytes", default=DEFAULT_MAX_SEGMENT_SIZE
    )

    snapshot_property = properties.values.get("snapshot", "false").strip().lower()
    if snapshot_property not in ("true", "false"):
        raise UsageError(f"{properties.source}: snapshot must be true or false, not {properties.values['snapshot']!r}")

    location = parse_location(target)
    if not isinstance(location, Path) and args.checkpoint_location is None:
        raise UsageError(f"a backup to {location} needs a local --checkpoint-location DIR for Spark's state")
    client = client_settings(properties, args.command_config, args.bootstrap_server)
    if args.schema_registry_interval is not None and args.schema_registry is None:
        raise UsageError("--schema-registry-interval needs --schema-registry")
    if args.schema_registry_interval is not None and (args.snapshot or snapshot_property == "true"):
        raise UsageError(
            "--schema-registry-interval is for a continuous backup: a snapshot captures the registry when it starts "
            "and when it has read everything"
        )
    encryption = encryption_key_source(args)  # the key read once here: a wrong one is said before anything starts
    files = SinkOptions(
        location,
        max_segment_size=max_segment_size,
        compression=None if args.compression == "none" else args.compression,
        encryption_key_file=encryption.file if encryption is not None else None,
        encryption_key_env=encryption.env if encryption is not None else None,
        log_format=args.log_format,
        lock_timeout=args.lock_timeout,
        schema_ids=schema_registry_address(args) is not None,  # the ids the records name: a capture fetches those
    )
    return BackupSettings(
        files=files,
        client=client,
        selection=selection,
        java_client=java_client_settings(properties, args.command_config, client["bootstrap.servers"]),
        kafka_source=args.kafka_source,
        snapshot=args.snapshot or snapshot_property == "true",
        checkpoint_location=args.checkpoint_location,
        offsets_interval=args.offsets_interval,
        trigger_interval=args.trigger_interval,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        prune_groups=args.prune_groups,
        accept_source_loss=args.accept_source_loss,
        schema_registry=schema_registry_address(args),
        schema_registry_interval=args.schema_registry_interval,
        debug=args.debug,
        spark_conf=spark_conf(args.spark_conf),
        umask=args.umask,
        monitoring=Monitoring.from_args(args),
    )
