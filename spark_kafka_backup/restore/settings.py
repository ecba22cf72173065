"""The restore job's settings, from flags and the original tool's files.

Accepted, and checked before anything touches the cluster:

- the original ``restore-standalone.sh`` flags: ``--bootstrap-server``,
  ``--source-dir``, ``--topics``, ``--batch-size``, ``--command-config``;
- the original source connector's properties (``--properties FILE``):
  ``source.dir``, ``topics``, ``batch.size``, ``cluster.*`` and the Kafka
  Connect boilerplate (ignored);
- spark-kafka-backup's own flags (``--help``).
"""

from __future__ import annotations

import argparse
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spark_kafka_backup.argtypes import byte_count, parse_time, positive_int
from spark_kafka_backup.arguments import (
    add_encryption_flags,
    add_schema_registry_flags,
    encryption_key_sources,
    schema_registry_address,
)
from spark_kafka_backup.errors import UsageError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.naming import TOPIC_GRAMMAR, is_topic_name
from spark_kafka_backup.job_options import Monitoring, job_parser, spark_conf
from spark_kafka_backup.kafka.connector_config import ConnectorProperties, client_settings
from spark_kafka_backup.kafka.topics import INTERNAL_TOPICS, TopicSelection
from spark_kafka_backup.partition.layout import state_dir
from spark_kafka_backup.partition.selection import MatchedRuns, Window
from spark_kafka_backup.restore.repartition import KEEP, MODES
from spark_kafka_backup.restore.throttle import Throttle
from spark_kafka_backup.restore.topic_configs import DEFAULT_POLICY, POLICIES
from spark_kafka_backup.schema_registry.client import RegistryAddress
from spark_kafka_backup.schema_registry.wire import IdRewrite
from spark_kafka_backup.storage import Location, parse_location

DEFAULT_BATCH_SIZE = 1 << 20

#: ``--schema-ids``: which fields of restored records hold schema ids to rewrite (docs/schema-registry.md).
SCHEMA_ID_FIELDS = ("auto", "values", "keys-and-values", "none")

_PROPERTY_KEYS = {"source.dir", "topics", "batch.size"}

#: ``--follow-interval``: seconds between a follower's passes over the backup (by default).
DEFAULT_FOLLOW_INTERVAL = 10.0

#: ``--hold-expires``: a follower's hold on the backup's segments lapses after this long without a pass.
DEFAULT_HOLD_EXPIRES = 24 * 3600.0


@dataclass(frozen=True)
class Following:
    """``--follow`` and ``--failover``: a standby cluster kept warm from a live backup (docs/standby.md,
    :mod:`spark_kafka_backup.restore.follow`)."""

    #: ``--failover``: one last pass, every group placed, the standby marked failed over, what it holds printed.
    failover: bool = False
    interval: float = DEFAULT_FOLLOW_INTERVAL
    #: ``--until CHECKPOINT``: follow up to that completed checkpoint's cut and stop there (a freeze).
    until_checkpoint: int | None = None
    #: ``--until TIME``: the newest completed checkpoint taken at or before it (resolved when the job starts).
    until_time: int | None = None
    #: ``--follower-name``: the name of this follower's hold on the backup (default: from the standby's address).
    name: str | None = None
    hold_expires: float = DEFAULT_HOLD_EXPIRES


_OFFSET_WINDOW = re.compile(r"^(?P<topic>[^:=]+)(?::(?P<partition>\d+))?=(?P<low>\d*)\.\.(?P<high>\d*)$")


@dataclass(frozen=True)
class RestoreSettings:
    source: Location
    client: dict[str, str]
    selection: TopicSelection | None  # None: every topic in the backup
    topic_map: dict[str, str] = field(default_factory=dict)
    partitions: dict[str, int] = field(default_factory=dict)
    from_time: int | None = None
    to_time: int | None = None
    groups_as_of: int | None = None
    checkpoint: int | None = None
    offset_windows: dict[tuple[str, int | None], tuple[int | None, int | None]] = field(default_factory=dict)
    batch_size: int = DEFAULT_BATCH_SIZE
    #: Records per second per partition, at most (``None``: as fast as the target takes them).
    max_rate: int | None = None
    #: Records and bytes per second for the whole restore (shared out to its tasks).
    throttle: Throttle = field(default_factory=Throttle)
    allow_non_empty: bool = False
    #: Restore into the topic incarnation the backup was read from (refused otherwise, whatever allow_non_empty says).
    allow_into_source: bool = False
    skip_bad_segments: bool = False
    accept_retention_loss: bool = False
    restamp: bool = False
    #: ``--restamp-zero-timestamps``: records stamped 0 are produced with the restore's time (librdkafka cannot
    #: send 0); without it the plan refuses them.
    restamp_zero_timestamps: bool = False
    #: ``--allow-compacted-target``: restore into an existing compacted topic.
    allow_compacted_target: bool = False
    force_offsets: bool = False
    dry_run: bool = False
    legacy: bool = False
    replication_factor: int = -1
    topic_config: dict[str, str] = field(default_factory=dict)
    drop_topic_config: frozenset[str] = frozenset()
    #: Which backed-up configurations created topics take (:mod:`spark_kafka_backup.restore.topic_configs`).
    topic_configs: str = DEFAULT_POLICY
    state_dir: Path | None = None
    spark_conf: dict[str, str] = field(default_factory=dict)
    #: ``--repartition``: how records find their target partition (see :mod:`spark_kafka_backup.restore.repartition`),
    #: for every target topic not in ``repartition_topics``.
    repartition: str = KEEP
    #: ``--repartition TOPIC=MODE``: per target topic.
    repartition_topics: dict[str, str] = field(default_factory=dict)
    #: Key-encryption keys for encrypted segments (``--encryption-key-file`` / ``--encryption-key-env``), read on
    #: the driver; the tasks get where to read them (files' paths, variables' names), never the keys.
    keys: KeyRing = field(default_factory=lambda: KeyRing({}))
    #: With keys: partitions without a seal record are read as they are (:mod:`spark_kafka_backup.catalog.seals`).
    allow_unauthenticated: bool = False
    key_sources: tuple[tuple[str | None, str | None], ...] = ()
    #: ``--umask``; None: the inherited one plus :data:`spark_kafka_backup.fsutil.DEFAULT_UMASK`.
    umask: int | None = None
    #: ``--metrics-*`` and ``--log-format``.
    monitoring: Monitoring = field(default_factory=Monitoring)
    #: ``--schema-registry``: the target registry the backup's schemas are registered in.
    schema_registry: RegistryAddress | None = None
    #: ``--schema-registry-import``: register under the backup's ids (the target in IMPORT mode); no id moves.
    schema_registry_import: bool = False
    #: ``--schema-ids``: per backed-up topic (``None``: every other topic), which fields hold schema ids.
    schema_ids: dict[str | None, str] = field(default_factory=lambda: {None: "auto"})
    #: Per backed-up topic, the schema ids its records' keys and values get (filled once the schemas are
    #: registered, :mod:`spark_kafka_backup.restore.schemas`).
    id_rewrites: dict[str, IdRewrite] = field(default_factory=dict)
    #: ``--where``: a Spark SQL predicate over the columns of the ``kbackup`` data source; only records it holds for
    #: are restored (docs/restore.md).
    where: str | None = None
    #: Per backed-up partition, the records that matched ``where`` (filled before the plan,
    #: :mod:`spark_kafka_backup.restore.matching`); a partition not named matched nothing.
    matched: dict[tuple[str, int], MatchedRuns] = field(default_factory=dict)
    #: ``--follow`` / ``--failover`` (``None``: a restore that runs once).
    following: Following | None = None
    #: Per backed-up partition, the offset a follower's pass reads up to (exclusive): what the backup's catalog
    #: holds as committed when the pass starts. Not part of the restore's identity (every pass is the same restore).
    pass_ends: Mapping[tuple[str, int], int] | None = None
    #: A follower's groups placed exactly by earlier passes: (group, backed-up topic, partition) -> the committed
    #: offset placed. A pass leaves them alone while their offset stays.
    settled_groups: Mapping[tuple[str, str, int], int] | None = None
    #: ``--metadata``: the sections of the cluster around the topics to compare (``None``: the records are restored).
    metadata: frozenset[str] | None = None
    #: ``--principal-map``: principals renamed as ``--topic-map`` renames topics (``User:old`` -> ``User:new``).
    principal_map: dict[str, str] = field(default_factory=dict)
    #: ``--metadata-as-of``: the version in force at a checkpoint's cut (its id) or at a time (epoch ms).
    metadata_checkpoint: int | None = None
    metadata_time: int | None = None
    #: ``--metadata-policy``: check, apply or replace (restore/cluster_metadata.py).
    metadata_policy: str = "check"
    #: ``--delete-extra``: replace may delete what only the target has.
    delete_extra: bool = False
    debug: bool = False

    def schema_id_fields(self, source_topic: str) -> str:
        """``--schema-ids`` for ``source_topic``."""
        return self.schema_ids.get(source_topic, self.schema_ids.get(None, "auto"))

    def id_rewrite(self, source_topic: str) -> IdRewrite | None:
        """What the restore does to the schema ids of ``source_topic``'s records (``None``: nothing)."""
        found = self.id_rewrites.get(source_topic)
        return found if found is not None and found.active else None

    def target_topic(self, source_topic: str) -> str:
        return self.topic_map.get(source_topic, source_topic)

    def repartition_mode(self, target_topic: str) -> str:
        """``--repartition`` for ``target_topic``."""
        return self.repartition_topics.get(target_topic, self.repartition)

    def check_target_options(self, restored: Sequence[str]) -> None:
        """Refuse ``--partitions`` and ``--repartition TOPIC=`` naming a topic this restore does not write into."""
        targets = {self.target_topic(topic): topic for topic in restored}
        for flag, named in (("--partitions", self.partitions), ("--repartition", self.repartition_topics)):
            for name in sorted(named):
                if name in targets:
                    continue
                hint = (
                    f" (it is restored as {self.target_topic(name)!r}: name the target topic)"
                    if name in restored
                    else ""
                )
                raise UsageError(
                    f"{flag} {name}=...: {name!r} is not a topic this restore writes into{hint}; it writes into "
                    f"{', '.join(map(repr, sorted(targets))) or 'no topic'}"
                )

    def window(self, topic: str, partition: int) -> Window:
        low, high = self.offset_windows.get((topic, partition), self.offset_windows.get((topic, None), (None, None)))
        matched = None
        if self.where is not None:
            matched = self.matched.get((topic, partition), MatchedRuns.of([], self.where))
        return Window(low, high, self.from_time, self.to_time, matched=matched)

    def check_target_names(self, restored: Sequence[str]) -> None:
        """Refuse a target name Kafka would refuse or keeps for itself, and two restored topics that would go into
        one target topic (a rename onto a restored name)."""
        by_target: dict[str, list[str]] = {}
        for topic in restored:
            target = self.target_topic(topic)
            mapped = f" (--topic-map {topic}={target})" if target != topic else ""
            if target in INTERNAL_TOPICS:
                raise UsageError(
                    f"target topic {target!r}{mapped} is one of Kafka's internal topics, which only the brokers "
                    "write: restore the backup of it into another topic name (--topic-map), or leave it out "
                    "(--topics)"
                )
            if not is_topic_name(target):
                raise UsageError(
                    f"target topic {target!r}{mapped} is not a valid Kafka topic name (expected {TOPIC_GRAMMAR})"
                )
            by_target.setdefault(target, []).append(topic)
        for target, sources in sorted(by_target.items()):
            if len(sources) > 1:
                renamed = [s for s in sources if s != target]
                kept = [s for s in sources if s == target]
                how = " and ".join(f"--topic-map {s}={target}" for s in renamed)
                also = f", and {target!r} itself is restored" if kept else ""
                raise UsageError(
                    f"{how} would restore {len(sources)} topics ({', '.join(sources)}) into one topic {target!r}"
                    f"{also}; map {target!r} elsewhere too, or leave one out with --topics"
                )

    @property
    def restore_state_dir(self) -> Location:
        return self.state_dir or state_dir(self.source) / "restore"

    def state_file(self, kind: str) -> Location:
        """A restore state file of ``kind`` for the target cluster (named after a hash of its bootstrap servers)."""
        cluster = hashlib.sha256(self.client["bootstrap.servers"].encode()).hexdigest()[:16]
        return self.restore_state_dir / f"{kind}-{cluster}.json"


def build_parser(prog: str = "spark-submit jobs/restore.py") -> argparse.ArgumentParser:
    parser, original, own = job_parser(prog, "restore")
    original.add_argument("--source-dir", help="the backup root (one directory per topic)")
    original.add_argument("--topics", help="comma-separated topics to restore (default: every topic in the backup)")
    original.add_argument("--batch-size", type=positive_int, help="producer batch size in bytes (default 1 MiB)")
    own.add_argument(
        "--max-rate",
        type=positive_int,
        metavar="RECORDS",
        help="produce at most RECORDS records per second into each partition, per partition (spares a busy "
        "target); --max-records-per-second limits the whole restore",
    )
    own.add_argument(
        "--max-records-per-second",
        type=positive_int,
        metavar="RECORDS",
        help="produce at most RECORDS records per second for the whole restore (shared by the partitions restored "
        "at once); --max-rate limits each partition",
    )
    own.add_argument(
        "--max-bytes-per-second",
        type=byte_count,
        metavar="BYTES",
        help="produce at most BYTES (keys, values, headers; 512K, 20M, 1G) per second in all",
    )
    own.add_argument("--topics-regex", help="restore topics whose whole name matches this regex")
    own.add_argument("--topic-map", action="append", default=[], metavar="OLD=NEW", help="restore OLD as NEW")
    own.add_argument(
        "--partitions", action="append", default=[], metavar="TOPIC=N", help="create TOPIC with N partitions"
    )
    own.add_argument(
        "--repartition",
        action="append",
        default=[],
        metavar="[TOPIC=]MODE",
        help="keep: backed-up partition P goes to target partition P (default); murmur2: by key, as Kafka's default "
        "partitioner would place it among the target's partitions (records without key round-robin); "
        "round-robin: every record to the next partition. Group offsets are then approximate (docs/restore.md). "
        "TOPIC=MODE for one target topic (repeatable)",
    )
    add_encryption_flags(own, purpose="encrypted segments of the backup were sealed with", several=True)
    own.add_argument(
        "--where",
        metavar="PREDICATE",
        help="only records this Spark SQL predicate holds for, over the columns of the kbackup data source: key, "
        "value, topic, partition, offset, timestamp, timestampType, headers (e.g. \"key = 'customer-42'\", "
        "\"array_contains(headers.key, 'trace')\"); evaluated by Spark before anything is produced",
    )
    own.add_argument("--from-time", help="only records at or after this time (ISO 8601 or epoch ms)")
    own.add_argument("--to-time", help="only records at or before this time (ISO 8601 or epoch ms)")
    own.add_argument(
        "--checkpoint",
        type=positive_int,
        metavar="ID",
        help="restore each partition up to this completed checkpoint's cut, and the groups as of the cut",
    )
    own.add_argument(
        "--groups-as-of",
        help="take consumer group offsets from the offset history as of this time "
        "(default with --to-time: that time, when the backup has history)",
    )
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
    own.add_argument(
        "--allow-restore-into-source",
        action="store_true",
        help="restore into the very topic the backup was read from (same cluster and topic id): its backed-up "
        "records are appended again; consumer groups are left where they are",
    )
    own.add_argument("--force-offsets", action="store_true", help="also move group offsets backwards")
    own.add_argument(
        "--skip-bad-segments",
        action="store_true",
        help="leave out segments whose checksums differ from the catalog, and report their offsets",
    )
    own.add_argument(
        "--accept-retention-loss",
        action="store_true",
        help="restore even where the target's retention.ms or retention.bytes deletes records soon after",
    )
    own.add_argument(
        "--allow-compacted-target",
        action="store_true",
        help="restore into an existing topic with cleanup.policy=compact (it keeps only the newest record per key)",
    )
    own.add_argument(
        "--restamp-zero-timestamps",
        action="store_true",
        help="produce records stamped 0 (1970-01-01) with the restore's time: librdkafka cannot send 0 "
        "(default: the plan refuses them)",
    )
    own.add_argument(
        "--restamp",
        action="store_true",
        help="let a LogAppendTime target give restored records new timestamps (default: keep the original ones)",
    )
    own.add_argument("--dry-run", action="store_true", help="print the plan and touch nothing")
    own.add_argument("--legacy-no-magic", action="store_true", help="read files from before the v1 magic byte")
    own.add_argument("--replication-factor", type=int, default=-1, help="for created topics (default: broker's)")
    own.add_argument(
        "--topic-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set this configuration on created topics, over the backed-up one (repeatable)",
    )
    own.add_argument(
        "--topic-configs",
        choices=POLICIES,
        default=DEFAULT_POLICY,
        help="which backed-up topic configurations created topics take: data (default: retention, compaction, "
        "timestamps, sizes, compression), all (also durability and broker settings such as min.insync.replicas), "
        "none",
    )
    own.add_argument(
        "--drop-topic-config",
        action="append",
        default=[],
        metavar="KEY",
        help="do not copy this backed-up configuration key to created topics (repeatable)",
    )
    registry = parser.add_argument_group("schema registry (docs/schema-registry.md)")
    add_schema_registry_flags(
        registry, purpose="to register the backup's schemas in, rewriting records' schema ids to the ids they get there"
    )
    registry.add_argument(
        "--schema-ids",
        action="append",
        default=[],
        metavar="[TOPIC=]FIELDS",
        help="which record fields hold schema ids to rewrite, for every topic or one (repeatable): auto (default) the "
        "keys and values of topics with a TOPIC-key / TOPIC-value subject, checking the other fields; values; "
        "keys-and-values; none (register the schemas, restore the records as they are)",
    )
    registry.add_argument(
        "--schema-registry-import",
        action="store_true",
        help="register the schemas under the backup's ids and version numbers, so that no record's id changes: "
        "the target registry must be in mode IMPORT (Confluent Schema Registry; refused where it is not)",
    )
    standby = parser.add_argument_group("standby (docs/standby.md)")
    standby.add_argument(
        "--follow",
        action="store_true",
        help="keep restoring what a live backup adds, pass after pass, into a standby cluster, with the consumer "
        "groups translated, until stopped (SIGTERM) or failed over",
    )
    standby.add_argument(
        "--failover",
        action="store_true",
        help="make the standby the cluster consumers use: one last pass, every group placed, following stopped "
        "for good, and what the standby holds printed per partition (a second failover changes nothing)",
    )
    standby.add_argument(
        "--follow-interval",
        type=_seconds,
        default=DEFAULT_FOLLOW_INTERVAL,
        metavar="SECONDS",
        help=f"seconds between passes (default {DEFAULT_FOLLOW_INTERVAL:.0f})",
    )
    standby.add_argument(
        "--until",
        metavar="CHECKPOINT|TIME",
        help="follow (or fail over) up to this completed checkpoint's cut and no further (a freeze before a bad "
        "event); a time picks the newest completed checkpoint taken at or before it",
    )
    standby.add_argument(
        "--follower-name",
        metavar="NAME",
        help="the name of this follower's hold, which keeps prune from deleting what it has not restored "
        "(default: standby- and a hash of the standby's bootstrap servers)",
    )
    standby.add_argument(
        "--hold-expires",
        type=_seconds,
        default=DEFAULT_HOLD_EXPIRES,
        metavar="SECONDS",
        help=f"a follower's hold lapses after this long without a pass (default {DEFAULT_HOLD_EXPIRES:.0f})",
    )
    metadata = parser.add_argument_group("the cluster around the topics (docs/restore.md)")
    metadata.add_argument(
        "--metadata",
        metavar="SECTIONS",
        help="compare the cluster around the topics as the backup captured it with the target (and change it by "
        "--metadata-policy), instead of restoring records: acls, users, configs, quotas, topics (comma-separated), or "
        "all",
    )
    metadata.add_argument(
        "--metadata-policy",
        choices=("check", "apply", "replace"),
        default="check",
        help="check (default): print each difference, exit 1 when there is one, change nothing; apply: create what "
        "the target lacks and change what differs, never delete; replace: also delete what only the target has "
        "(with --delete-extra; list it first with --dry-run)",
    )
    metadata.add_argument(
        "--delete-extra",
        action="store_true",
        help="with --metadata-policy replace: delete from the target what the backup does not have",
    )
    metadata.add_argument(
        "--metadata-as-of",
        metavar="CHECKPOINT|TIME",
        help="compare the version the backup had captured at this checkpoint's cut or time (default: its newest; "
        "a minute after an incident the newest may be the damaged state)",
    )
    metadata.add_argument(
        "--principal-map",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="compare principal OLD's ACLs, SCRAM user and quotas as NEW's (User:alice=User:alice-dr; repeatable)",
    )
    own.add_argument(
        "--state-dir",
        type=Path,
        help="where the restore notes topics whose timestamp type it sets afterwards "
        "(default: the backup's state directory, restore/)",
    )
    return parser


def parse_restore_args(argv: Sequence[str], *, prog: str = "spark-submit jobs/restore.py") -> RestoreSettings:
    """Parse and check; raise :class:`UsageError` for anything wrong (argparse exits for bad flags)."""
    args = build_parser(prog).parse_args(argv)
    properties = ConnectorProperties.load(args.properties, _PROPERTY_KEYS)
    source = properties.required(
        "--source-dir", args.source_dir, "source.dir",
        missing="the restore needs a backup: --source-dir DIR (or source.dir in --properties)",
    )  # fmt: skip
    topics = properties.merge("--topics", args.topics, "topics")
    if topics and args.topics_regex:
        raise UsageError("give topics or a topics regex, not both")
    selection = (
        TopicSelection.from_list(topics)
        if topics
        else TopicSelection(pattern=args.topics_regex)
        if args.topics_regex
        else None
    )
    batch_size = properties.positive("--batch-size", args.batch_size, "batch.size", default=DEFAULT_BATCH_SIZE)
    client = client_settings(properties, args.command_config, args.bootstrap_server)

    topic_map = _pairs(args.topic_map, "--topic-map", "OLD=NEW")
    if len(set(topic_map.values())) != len(topic_map):
        raise UsageError("--topic-map maps two topics to the same target")
    partitions: dict[str, int] = {}
    for topic, count in _pairs(args.partitions, "--partitions", "TOPIC=N").items():
        try:
            partitions[topic] = positive_int(count)
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"--partitions {topic}={count}: {exc}") from exc
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
    sources = encryption_key_sources(args)
    repartition = _repartition_modes(args.repartition)
    settings = RestoreSettings(
        source=parse_location(source),
        client=client,
        selection=selection,
        topic_map=topic_map,
        partitions=partitions,
        from_time=from_time,
        to_time=to_time,
        groups_as_of=parse_time(args.groups_as_of, "--groups-as-of") if args.groups_as_of else None,
        checkpoint=args.checkpoint,
        offset_windows=windows,
        batch_size=batch_size,
        max_rate=args.max_rate,
        throttle=Throttle(args.max_records_per_second, args.max_bytes_per_second),
        allow_non_empty=args.allow_non_empty,
        allow_into_source=args.allow_restore_into_source,
        skip_bad_segments=args.skip_bad_segments,
        accept_retention_loss=args.accept_retention_loss,
        restamp=args.restamp,
        restamp_zero_timestamps=args.restamp_zero_timestamps,
        allow_compacted_target=args.allow_compacted_target,
        force_offsets=args.force_offsets,
        dry_run=args.dry_run,
        legacy=args.legacy_no_magic,
        replication_factor=args.replication_factor,
        topic_config=_pairs(args.topic_config, "--topic-config", "KEY=VALUE"),
        drop_topic_config=frozenset(args.drop_topic_config),
        topic_configs=args.topic_configs,
        state_dir=args.state_dir,
        spark_conf=spark_conf(args.spark_conf),
        repartition=repartition.pop(None, KEEP),
        repartition_topics={topic: mode for topic, mode in repartition.items() if topic is not None},
        keys=KeyRing.of(source.key for source in sources),
        allow_unauthenticated=args.allow_unauthenticated,
        key_sources=tuple(source.where() for source in sources),
        umask=args.umask,
        monitoring=Monitoring.from_args(args),
        schema_registry=schema_registry_address(args),
        schema_ids=_schema_id_fields(args.schema_ids),
        schema_registry_import=args.schema_registry_import,
        where=_predicate(args.where),
        following=_following(args),
        metadata=_metadata(args),
        principal_map=_principal_map(args.principal_map),
        metadata_checkpoint=positive_int(args.metadata_as_of) if (args.metadata_as_of or "").isdigit() else None,
        metadata_time=None
        if args.metadata_as_of is None or args.metadata_as_of.isdigit()
        else parse_time(args.metadata_as_of, "--metadata-as-of"),
        metadata_policy=args.metadata_policy,
        delete_extra=args.delete_extra,
        debug=args.debug,
    )
    if settings.metadata is not None and settings.following is not None:
        raise UsageError("--metadata does not go with --follow or --failover: compare with a restore of its own")
    if settings.metadata is not None:
        changes = args.metadata_policy != "check"
        given = [flag for name, flag in (*_NOT_WITH_FOLLOW, ("topics", "--topics"), ("topics_regex", "--topics-regex"))
                 if getattr(args, name, None) and not (changes and name == "dry_run")]  # fmt: skip
        if given:
            raise UsageError(f"--metadata compares the cluster around the topics as the backup captured it, and "
                             f"restores no record: {', '.join(given)} would change nothing there")  # fmt: skip
        if args.delete_extra and args.metadata_policy != "replace":
            raise UsageError(f"--delete-extra goes with --metadata-policy replace (--metadata-policy "
                             f"{args.metadata_policy} never deletes)")  # fmt: skip
        if args.metadata_policy == "replace" and not (args.delete_extra or args.dry_run):
            raise UsageError("--metadata-policy replace deletes from the target what the backup does not have: list "
                             "it first with --dry-run, then run again with --delete-extra")  # fmt: skip
    if settings.metadata is None and (
        args.principal_map or args.metadata_policy != "check" or args.metadata_as_of or args.delete_extra
    ):
        raise UsageError(
            "--principal-map, --metadata-policy, --metadata-as-of and --delete-extra go with --metadata SECTIONS"
        )
    if settings.following is not None and settings.schema_registry is not None:
        raise UsageError(
            "--schema-registry does not go with --follow or --failover yet: register the backup's schemas with a "
            "restore of its own first, or restore the records as they are"
        )
    if settings.schema_registry is None and args.schema_ids:
        raise UsageError("--schema-ids needs --schema-registry")
    if settings.schema_registry is None and args.schema_registry_import:
        raise UsageError("--schema-registry-import needs --schema-registry")
    if selection is not None and selection.topics is not None:
        settings.check_target_names(selection.topics)  # the rest is checked once the backup's topics are listed
    return settings


def _metadata(args: argparse.Namespace) -> frozenset[str] | None:
    from spark_kafka_backup.restore.cluster_metadata import parse_sections

    if args.metadata is None:
        return None
    return parse_sections(args.metadata)


#: ``--principal-map``'s OLD=NEW: two principals TYPE:NAME, split at the first "=" that starts the second (a TLS
#: principal's name holds "=" itself: User:CN=alice,O=acme).
_PRINCIPAL_PAIR = re.compile(r"([A-Za-z]+:.+?)=([A-Za-z]+:.+)")


def _principal_map(items: list[str]) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for item in items:
        pair = _PRINCIPAL_PAIR.fullmatch(item)
        if pair is None:
            raise UsageError(f"--principal-map takes OLD=NEW, two principals TYPE:NAME (as User:alice=User:alice-dr), "
                             f"not {item!r}")  # fmt: skip
        old, new = pair[1], pair[2]
        if old in mapping:
            raise UsageError(f"--principal-map gives {old!r} twice")
        if old.startswith("User:") != new.startswith("User:"):
            raise UsageError(f"--principal-map {item}: a User: principal maps to a User: principal (its SCRAM "
                             "credentials go with it)")  # fmt: skip
        mapping[old] = new
    if len(set(mapping.values())) != len(mapping):
        raise UsageError("--principal-map maps two principals to the same one")
    return mapping


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, not {text!r}")
    return value


#: Options a follower refuses: each pass is the same restore of everything the backup holds, in order.
_NOT_WITH_FOLLOW = (
    ("where", "--where"),
    ("from_time", "--from-time"),
    ("to_time", "--to-time"),
    ("checkpoint", "--checkpoint"),
    ("groups_as_of", "--groups-as-of"),
    ("offset_window", "--offset-window"),
    ("dry_run", "--dry-run"),
    ("skip_bad_segments", "--skip-bad-segments"),
)


def _following(args: argparse.Namespace) -> Following | None:
    """``--follow``/``--failover`` and their options, checked against the rest of the command line."""
    named = (("--until", args.until), ("--follower-name", args.follower_name))
    standby_flags = [flag for flag, given in named if given]
    if not args.follow and not args.failover:
        if standby_flags:
            raise UsageError(f"{standby_flags[0]} goes with --follow or --failover")
        return None
    if args.follow and args.failover:
        raise UsageError("--follow and --failover are two steps: stop the follower (SIGTERM), then run --failover")
    flag = "--follow" if args.follow else "--failover"
    for name, option in _NOT_WITH_FOLLOW:
        if getattr(args, name):
            raise UsageError(
                f"{option} does not go with {flag}: a standby is the whole backup, in order (--until freezes it at "
                "a checkpoint)"
            )
    if any(mode.split("=")[-1] != KEEP for mode in args.repartition):
        raise UsageError(f"--repartition does not go with {flag}: a standby keeps each record's partition")
    until_checkpoint = until_time = None
    if args.until is not None:
        if args.until.isdigit():
            until_checkpoint = positive_int(args.until)
        else:
            until_time = parse_time(args.until, "--until")
    name = args.follower_name
    if name is not None and not re.fullmatch(r"[A-Za-z0-9._-]{1,120}", name):
        raise UsageError(f"--follower-name takes 1 to 120 letters, digits, '.', '_' or '-', not {name!r}")
    return Following(
        failover=args.failover,
        interval=args.follow_interval,
        until_checkpoint=until_checkpoint,
        until_time=until_time,
        name=name,
        hold_expires=args.hold_expires,
    )


def _per_topic(items: Sequence[str], flag: str, word: str, choices: Sequence[str]) -> dict[str | None, str]:
    """``FLAG VALUE`` and ``FLAG TOPIC=VALUE`` items, each value one of ``choices`` (``None``: every other topic)."""
    found: dict[str | None, str] = {}
    for item in items:
        topic, sep, value = item.rpartition("=")
        name = topic if sep else None
        if value not in choices or (sep and not topic):
            raise UsageError(f"{flag} takes [TOPIC=]{word}, not {item!r} ({word}: {', '.join(choices)})")
        if name in found:
            raise UsageError(f"{flag} gives {'every topic' if name is None else repr(name)} twice")
        found[name] = value
    return found


def _repartition_modes(items: Sequence[str]) -> dict[str | None, str]:
    """``--repartition MODE`` and ``--repartition TOPIC=MODE`` items."""
    return _per_topic(items, "--repartition", "MODE", MODES)


def _schema_id_fields(items: Sequence[str]) -> dict[str | None, str]:
    """``--schema-ids FIELDS`` and ``--schema-ids TOPIC=FIELDS`` items."""
    return {None: "auto", **_per_topic(items, "--schema-ids", "FIELDS", SCHEMA_ID_FIELDS)}


def _predicate(text: str | None) -> str | None:
    """``--where``: a predicate, not blank (Spark parses it: :mod:`spark_kafka_backup.restore.matching`)."""
    if text is None:
        return None
    if not text.strip():
        raise UsageError("--where takes a Spark SQL predicate such as \"key = 'customer-42'\", not an empty text")
    return text.strip()


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
