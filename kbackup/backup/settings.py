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
- kbackup's own flags (see ``--help``).

A flag and a property that set the same thing must agree.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kbackup.errors import UsageError
from kbackup.kafka.java_client_settings import librdkafka_settings
from kbackup.kafka.topics import TopicSelection
from kbackup.partition.writer import DEFAULT_MAX_SEGMENT_SIZE
from kbackup.properties import read_properties

#: Where the job keeps Spark's checkpoint and its own state inside the backup root.
STATE_DIR_NAME = ".kbackup"

_CONNECT_BOILERPLATE = {"name", "connector.class", "tasks.max", "key.converter", "value.converter", "header.converter"}
_PROPERTY_KEYS = {"target.dir", "topics", "topics.regex", "max.segment.size.bytes", "snapshot"} | _CONNECT_BOILERPLATE


@dataclass(frozen=True)
class BackupSettings:
    """Everything the backup job needs, checked."""

    target: Path
    client: dict[str, str]
    selection: TopicSelection
    snapshot: bool = False
    max_segment_size: int = DEFAULT_MAX_SEGMENT_SIZE
    checkpoint_location: Path | None = None
    offsets_interval: float = 60.0
    trigger_interval: float = 10.0
    max_offsets_per_trigger: int | None = None
    prune_groups: bool = False
    debug: bool = False
    spark_conf: dict[str, str] = field(default_factory=dict)

    @property
    def checkpoint(self) -> Path:
        return self.checkpoint_location or self.target / STATE_DIR_NAME / "spark-checkpoint"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spark-submit jobs/backup.py",
        description="Back up Kafka topics into kafka-backup v1 files, continuously or as a snapshot.",
    )
    original = parser.add_argument_group("options of the original backup-standalone.sh")
    original.add_argument("--bootstrap-server", help="Kafka bootstrap servers, host:port[,host:port]")
    original.add_argument("--target-dir", help="the backup root: one directory per topic is written inside")
    original.add_argument("--topics", help="comma-separated topics to back up")
    original.add_argument("--topics-regex", help="back up every topic whose whole name matches this regex")
    original.add_argument("--max-segment-size", type=_positive_int, help="roll segments above this many bytes")
    original.add_argument("--command-config", type=Path, help="Kafka client settings file (SSL/SASL)")
    original.add_argument("--snapshot", action="store_true", help="back up what exists now, then exit")
    original.add_argument("--debug", action="store_true", help="log more")
    own = parser.add_argument_group("kbackup options")
    own.add_argument("--properties", type=Path, help="the original sink connector's .properties file")
    own.add_argument(
        "--checkpoint-location",
        type=Path,
        help=f"Spark checkpoint directory (default: TARGET/{STATE_DIR_NAME}/spark-checkpoint)",
    )
    own.add_argument(
        "--offsets-interval",
        type=_positive_float,
        default=60.0,
        help="seconds between consumer group offset rounds (default 60)",
    )
    own.add_argument(
        "--trigger-interval",
        type=_positive_float,
        default=10.0,
        help="seconds between micro-batches in continuous mode (default 10)",
    )
    own.add_argument("--max-offsets-per-trigger", type=_positive_int, help="at most this many records per micro-batch")
    own.add_argument(
        "--prune-groups",
        action="store_true",
        help="drop groups that no longer exist on the cluster from the stored consumer offsets",
    )
    own.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the session (repeatable)",
    )
    return parser


def parse_backup_args(argv: Sequence[str]) -> BackupSettings:
    """Parse and check; raise :class:`UsageError` for anything wrong (argparse exits for bad flags)."""
    args = build_parser().parse_args(argv)
    properties: dict[str, str] = {}
    source = ""
    if args.properties is not None:
        source = str(args.properties)
        properties = read_properties(args.properties, what="properties file")
        for key in properties:
            if key not in _PROPERTY_KEYS and not key.startswith("cluster."):
                raise UsageError(f"{source}: unknown property {key!r}")

    target = _merge("--target-dir", args.target_dir, "target.dir", properties, source)
    if not target:
        raise UsageError("the backup needs a target directory: --target-dir DIR (or target.dir in --properties)")
    topics = _merge("--topics", args.topics, "topics", properties, source)
    regex = _merge("--topics-regex", args.topics_regex, "topics.regex", properties, source)
    if topics and regex:
        raise UsageError("give topics or a topics regex, not both")
    if not topics and not regex:
        raise UsageError("say what to back up: --topics LIST or --topics-regex REGEX")
    selection = TopicSelection.from_list(topics) if topics else TopicSelection(pattern=regex)

    size_text = _merge(
        "--max-segment-size",
        None if args.max_segment_size is None else str(args.max_segment_size),
        "max.segment.size.bytes",
        properties,
        source,
    )
    try:
        max_segment_size = _positive_int(size_text) if size_text else DEFAULT_MAX_SEGMENT_SIZE
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"{source}: max.segment.size.bytes: {exc}") from None

    snapshot_property = properties.get("snapshot", "false").strip().lower()
    if snapshot_property not in ("true", "false"):
        raise UsageError(f"{source}: snapshot must be true or false, not {properties['snapshot']!r}")

    client = {key[len("cluster.") :]: value for key, value in properties.items() if key.startswith("cluster.")}
    if args.command_config is not None:
        java = read_properties(args.command_config, what="command config")
        for key, value in librdkafka_settings(java, source=str(args.command_config)).items():
            if key in client and client[key] != value:
                raise UsageError(f"{args.command_config}: {key} disagrees with cluster.{key} in {source}")
            client[key] = value
    bootstrap = args.bootstrap_server or client.get("bootstrap.servers")
    if args.bootstrap_server and client.get("bootstrap.servers") not in (None, args.bootstrap_server):
        raise UsageError(f"--bootstrap-server disagrees with cluster.bootstrap.servers in {source}")
    if not bootstrap:
        raise UsageError("the backup needs --bootstrap-server (or cluster.bootstrap.servers in --properties)")
    client["bootstrap.servers"] = bootstrap

    spark_conf = {}
    for item in args.spark_conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--spark-conf takes KEY=VALUE, not {item!r}")
        spark_conf[key] = value

    return BackupSettings(
        target=Path(target),
        client=client,
        selection=selection,
        snapshot=args.snapshot or snapshot_property == "true",
        max_segment_size=max_segment_size,
        checkpoint_location=args.checkpoint_location,
        offsets_interval=args.offsets_interval,
        trigger_interval=args.trigger_interval,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        prune_groups=args.prune_groups,
        debug=args.debug,
        spark_conf=spark_conf,
    )


def _merge(flag: str, value: str | None, key: str, properties: Mapping[str, str], source: str) -> str | None:
    from_file = properties.get(key)
    if value is not None and from_file is not None and value != from_file:
        raise UsageError(f"{flag} {value!r} disagrees with {key}={from_file!r} in {source}")
    return value if value is not None else from_file


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a whole number > 0, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value
