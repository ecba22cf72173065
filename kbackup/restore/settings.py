"""The restore job's settings, from flags and the original tool's files.

Accepted, and checked before anything touches the cluster:

- the original ``restore-standalone.sh`` flags: ``--bootstrap-server``,
  ``--source-dir``, ``--topics``, ``--batch-size``, ``--command-config``;
- the original source connector's properties (``--properties FILE``):
  ``source.dir``, ``topics``, ``batch.size``, ``cluster.*`` and the Kafka
  Connect boilerplate (ignored);
- kbackup's own flags (``--help``).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from kbackup.errors import UsageError
from kbackup.kafka.java_client_settings import librdkafka_settings
from kbackup.kafka.topics import TopicSelection
from kbackup.properties import read_properties
from kbackup.restore.selection import Window

DEFAULT_BATCH_SIZE = 1 << 20

_CONNECT_BOILERPLATE = {"name", "connector.class", "tasks.max", "key.converter", "value.converter", "header.converter"}
_PROPERTY_KEYS = {"source.dir", "topics", "batch.size"} | _CONNECT_BOILERPLATE
_OFFSET_WINDOW = re.compile(r"^(?P<topic>[^:=]+)(?::(?P<partition>\d+))?=(?P<low>\d*)\.\.(?P<high>\d*)$")


@dataclass(frozen=True)
class RestoreSettings:
    source: Path
    client: dict[str, str]
    selection: TopicSelection | None  # None: every topic in the backup
    topic_map: dict[str, str] = field(default_factory=dict)
    partitions: dict[str, int] = field(default_factory=dict)
    from_time: int | None = None
    to_time: int | None = None
    offset_windows: dict[tuple[str, int | None], tuple[int | None, int | None]] = field(default_factory=dict)
    batch_size: int = DEFAULT_BATCH_SIZE
    allow_non_empty: bool = False
    force_offsets: bool = False
    dry_run: bool = False
    legacy: bool = False
    replication_factor: int = -1
    state_dir: Path | None = None
    spark_conf: dict[str, str] = field(default_factory=dict)

    def target_topic(self, source_topic: str) -> str:
        return self.topic_map.get(source_topic, source_topic)

    def window(self, topic: str, partition: int) -> Window:
        low, high = self.offset_windows.get((topic, partition), self.offset_windows.get((topic, None), (None, None)))
        return Window(low, high, self.from_time, self.to_time)

    @property
    def restore_state_dir(self) -> Path:
        return self.state_dir or self.source / ".kbackup" / "restore"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spark-submit jobs/restore.py",
        description="Restore a kafka-backup v1 backup into a Kafka cluster and remap consumer group offsets.",
    )
    original = parser.add_argument_group("options of the original restore-standalone.sh")
    original.add_argument("--bootstrap-server", help="the target cluster's bootstrap servers")
    original.add_argument("--source-dir", help="the backup root (one directory per topic)")
    original.add_argument("--topics", help="comma-separated topics to restore (default: every topic in the backup)")
    original.add_argument("--batch-size", type=_positive_int, help="producer batch size in bytes (default 1 MiB)")
    original.add_argument("--command-config", type=Path, help="Kafka client settings file (SSL/SASL)")
    original.add_argument("--debug", action="store_true", help="log more")
    own = parser.add_argument_group("kbackup options")
    own.add_argument("--properties", type=Path, help="the original source connector's .properties file")
    own.add_argument("--topics-regex", help="restore topics whose whole name matches this regex")
    own.add_argument("--topic-map", action="append", default=[], metavar="OLD=NEW", help="restore OLD as NEW")
    own.add_argument(
        "--partitions", action="append", default=[], metavar="TOPIC=N", help="create TOPIC with N partitions"
    )
    own.add_argument("--from-time", help="only records at or after this time (ISO 8601 or epoch ms)")
    own.add_argument("--to-time", help="only records at or before this time (ISO 8601 or epoch ms)")
    own.add_argument(
        "--offset-window",
        action="append",
        default=[],
        metavar="TOPIC[:PARTITION]=FROM..TO",
        help="only source offsets FROM..TO (inclusive; either may be empty)",
    )
    own.add_argument(
        "--allow-non-empty",
        action="store_true",
        help="restore into partitions that already hold records, after them (offsets then differ from an empty target)",
    )
    own.add_argument("--force-offsets", action="store_true", help="also move group offsets backwards")
    own.add_argument("--dry-run", action="store_true", help="print the plan and touch nothing")
    own.add_argument("--legacy-no-magic", action="store_true", help="read files from before the v1 magic byte")
    own.add_argument("--replication-factor", type=int, default=-1, help="for created topics (default: broker's)")
    own.add_argument("--state-dir", type=Path, help="where --allow-non-empty records its starting points")
    own.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting")
    return parser


def parse_restore_args(argv: Sequence[str]) -> RestoreSettings:
    args = build_parser().parse_args(argv)
    properties: dict[str, str] = {}
    source_name = ""
    if args.properties is not None:
        source_name = str(args.properties)
        properties = read_properties(args.properties, what="properties file")
        for key in properties:
            if key not in _PROPERTY_KEYS and not key.startswith("cluster."):
                raise UsageError(f"{source_name}: unknown property {key!r}")

    def merged(flag: str, value: str | None, key: str) -> str | None:
        from_file = properties.get(key)
        if value is not None and from_file is not None and value != from_file:
            raise UsageError(f"{flag} {value!r} disagrees with {key}={from_file!r} in {source_name}")
        return value if value is not None else from_file

    source = merged("--source-dir", args.source_dir, "source.dir")
    if not source:
        raise UsageError("the restore needs a backup: --source-dir DIR (or source.dir in --properties)")
    topics = merged("--topics", args.topics, "topics")
    if topics and args.topics_regex:
        raise UsageError("give topics or a topics regex, not both")
    selection = (
        TopicSelection.from_list(topics)
        if topics
        else TopicSelection(pattern=args.topics_regex)
        if args.topics_regex
        else None
    )
    batch_text = merged("--batch-size", None if args.batch_size is None else str(args.batch_size), "batch.size")
    try:
        batch_size = _positive_int(batch_text) if batch_text else DEFAULT_BATCH_SIZE
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"batch size: {exc}") from None

    client = {key[len("cluster.") :]: value for key, value in properties.items() if key.startswith("cluster.")}
    if args.command_config is not None:
        java = read_properties(args.command_config, what="command config")
        client.update(librdkafka_settings(java, source=str(args.command_config)))
    bootstrap = args.bootstrap_server or client.get("bootstrap.servers")
    if args.bootstrap_server and client.get("bootstrap.servers") not in (None, args.bootstrap_server):
        raise UsageError(f"--bootstrap-server disagrees with cluster.bootstrap.servers in {source_name}")
    if not bootstrap:
        raise UsageError("the restore needs --bootstrap-server (or cluster.bootstrap.servers in --properties)")
    client["bootstrap.servers"] = bootstrap

    topic_map = _pairs(args.topic_map, "--topic-map", "OLD=NEW")
    if len(set(topic_map.values())) != len(topic_map):
        raise UsageError("--topic-map maps two topics to the same target")
    partitions = {
        topic: _positive_int(count) for topic, count in _pairs(args.partitions, "--partitions", "TOPIC=N").items()
    }
    from_time = parse_time(args.from_time, "--from-time") if args.from_time else None
    to_time = parse_time(args.to_time, "--to-time") if args.to_time else None
    if from_time is not None and to_time is not None and from_time > to_time:
        raise UsageError("--from-time is after --to-time")
    windows: dict[tuple[str, int | None], tuple[int | None, int | None]] = {}
    for item in args.offset_window:
        match = _OFFSET_WINDOW.match(item)
        if match is None:
            raise UsageError(f"--offset-window takes TOPIC[:PARTITION]=FROM..TO, not {item!r}")
        low = int(match["low"]) if match["low"] else None
        high = int(match["high"]) if match["high"] else None
        if low is not None and high is not None and low > high:
            raise UsageError(f"--offset-window {item!r}: FROM is above TO")
        part = int(match["partition"]) if match["partition"] is not None else None
        windows[(match["topic"], part)] = (low, high)
    spark_conf = {}
    for item in args.spark_conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--spark-conf takes KEY=VALUE, not {item!r}")
        spark_conf[key] = value
    return RestoreSettings(
        source=Path(source),
        client=client,
        selection=selection,
        topic_map=topic_map,
        partitions=partitions,
        from_time=from_time,
        to_time=to_time,
        offset_windows=windows,
        batch_size=batch_size,
        allow_non_empty=args.allow_non_empty,
        force_offsets=args.force_offsets,
        dry_run=args.dry_run,
        legacy=args.legacy_no_magic,
        replication_factor=args.replication_factor,
        state_dir=args.state_dir,
        spark_conf=spark_conf,
    )


def parse_time(text: str, flag: str) -> int:
    """Epoch milliseconds from digits, or from ISO 8601 (UTC when no zone is given)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{flag} takes ISO 8601 (2026-11-22T08:00:00Z) or epoch milliseconds, not {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _pairs(items: Sequence[str], flag: str, shape: str) -> dict[str, str]:
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise UsageError(f"{flag} takes {shape}, not {item!r}")
        if key in result:
            raise UsageError(f"{flag} gives {key!r} twice")
        result[key] = value
    return result


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a whole number > 0, got {text!r}")
    return value
