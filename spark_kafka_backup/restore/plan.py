"""What a restore will do, decided on the driver before anything is produced.

For every backed-up partition the plan knows its target topic and partition,
its selected records (see :mod:`spark_kafka_backup.partition.selection`), and how the target
partition stands:

- **empty** (or holding only aborted transactions): restore everything;
- **this restore's progress marker** (an earlier run of the same restore
  stopped, or finished, see :mod:`spark_kafka_backup.restore.marker`): go on from the
  marker's source offset. A second run of a finished restore produces nothing;
- **a prefix of this restore without a marker** (a restore by an older
  spark-kafka-backup): the target's first and last records equal the first and last of
  that many selected records, so the restore goes on after them;
- **something else**: an error, unless ``--allow-non-empty``, which restores
  after the records already there (the first commit's marker lets a rerun
  find its place).

The task re-reads the marker after fencing other producers, so what it does
rests on the target as it is then, not as it was when planned.

Errors (a topic missing from the backup, a target topic with fewer partitions
than the backup, a non-empty target) are raised here, before any record is
produced.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from spark_kafka_backup.catalog import checkpoints
from spark_kafka_backup.catalog.erase import refuse_unfinished_erase
from spark_kafka_backup.catalog.integrity import (
    BadSegment,
    bad_segments,
    damage_text,
    offsets_overlap,
    unverifiable_segments,
)
from spark_kafka_backup.catalog.offset_history import has_history, offsets_as_of
from spark_kafka_backup.catalog.prune import pending_deletions
from spark_kafka_backup.catalog.seals import seal_problems
from spark_kafka_backup.catalog.segment_set import lost_segments
from spark_kafka_backup.catalog.store import read_catalog
from spark_kafka_backup.catalog.topics import TopicRecord, read_topic_record
from spark_kafka_backup.errors import (
    BackupNotFoundError,
    ClusterError,
    DamagedBackupError,
    DecryptionKeyError,
    SparkKafkaBackupError,
    TargetLimitError,
    TargetNotEmptyError,
    UsageError,
)
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.kafka.cluster import PROGRESS_GROUP, list_offsets, partition_counts
from spark_kafka_backup.kafka.permissions import refuse_missing
from spark_kafka_backup.partition.layout import list_partitions, list_topics
from spark_kafka_backup.partition.offsets_file import read_consumer_offsets
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.selection import Window, count_selected, nth_selected, same_record
from spark_kafka_backup.restore.access import restore_permissions
from spark_kafka_backup.restore.group_offsets import current_offsets
from spark_kafka_backup.restore.marker import (
    PLAN_MARKER_SECONDS,
    ProgressMarker,
    marker_consumer,
    read_markers,
    restore_identity,
)
from spark_kafka_backup.restore.partition_task import FOLLOWER_WAY_ON
from spark_kafka_backup.restore.profile import RecordsProfile, profile_partition
from spark_kafka_backup.restore.repartition import KEEP, ROUND_ROBIN, Repartition, Source
from spark_kafka_backup.restore.settings import RestoreSettings
from spark_kafka_backup.restore.stream_columns import count_routed_columns, count_targets
from spark_kafka_backup.restore.target_check import missing_records, refuse_lost
from spark_kafka_backup.restore.target_limits import (
    PRODUCER_MESSAGE_BYTES,
    Choices,
    TopicLimits,
    broker_configs,
    broker_topic_defaults,
    effective_topic_configs,
    judge,
    now_ms,
    request_limit,
)
from spark_kafka_backup.restore.timestamp_type import (
    LOG_APPEND_TIME,
    TIMESTAMP_TYPE,
    PendingTimestampTypes,
    creation_config,
)
from spark_kafka_backup.restore.topic_configs import choose_configs
from spark_kafka_backup.schema_registry.wire_columns import ColumnIdRewrite
from spark_kafka_backup.text import count as count_of
from spark_kafka_backup.text import iso_time

log = logging.getLogger("spark_kafka_backup.restore")


@dataclass
class TopicPlan:
    source_topic: str
    target_topic: str
    existing_partitions: int | None  # None: the topic will be created
    create_partitions: int | None
    config: dict[str, str] = field(default_factory=dict)
    #: The Kafka cluster id and topic id the backup was read from (``None``: not recorded).
    origin_cluster: str | None = None
    origin_topic_id: str | None = None
    #: ``message.timestamp.type`` to set once the restore is done (see
    #: :mod:`spark_kafka_backup.restore.timestamp_type`).
    set_timestamp_type: str | None = None
    #: What the plan decided about the target's limits (:mod:`spark_kafka_backup.restore.target_limits`), to say so.
    notes: list[str] = field(default_factory=list)
    #: The producer's ``message.max.bytes`` for the largest record, and the largest batch the topic takes.
    producer_message_bytes: int = PRODUCER_MESSAGE_BYTES
    batch_limit: int | None = None
    #: The target stamps every record itself (LogAppendTime, accepted): the records' own timestamps do not matter.
    restamped: bool = False
    #: Why a topic to create gets no setting from the backup (it takes the target's defaults), as the dry run says.
    no_config_because: str = "the source topic had no setting to copy"

    def describe_origin(self) -> str:
        if self.origin_cluster is None:
            return f"{self.source_topic}: the backup does not record which cluster it came from"
        return f"{self.source_topic}: backed up from cluster {self.origin_cluster}, topic id {self.origin_topic_id}"


#: ``PartitionPlan.selected`` of a follower's pass until it is counted from where the standby stands.
UNCOUNTED = -1


@dataclass
class PartitionPlan:
    source_topic: str
    source_partition: int
    target_topic: str
    target_partition: int
    window: Window
    selected: int
    groups: dict[str, int]
    target_start: int = 0
    target_end: int = 0
    skip: int = 0
    baseline: int = 0
    #: The target offset after the last record of this restore already there (the end, when there is none).
    after_last: int = 0
    #: The target partition held this restore's progress marker when planned (an earlier run's records are there).
    has_marker: bool = False
    status: str = "empty"
    bad_segments: list[BadSegment] = field(default_factory=list)
    #: The restore's name for these records on the target (see :mod:`spark_kafka_backup.restore.marker`).
    identity: str = ""
    #: Source offset to go on from: the selected records below it are in the target.
    resume_from: int = 0
    #: Identity of another restore's marker on the target partition that this restore may replace.
    replaces: str | None = None
    #: Set when the topic is repartitioned: this target partition takes its share of every backed-up partition
    #: (``source_partition`` is then -1, and positions replace source offsets, see
    #: :mod:`spark_kafka_backup.restore.repartition`).
    repartition: Repartition | None = None

    @property
    def to_produce(self) -> int:
        return self.selected - self.skip


@dataclass
class RestorePlan:
    topics: list[TopicPlan] = field(default_factory=list)
    partitions: list[PartitionPlan] = field(default_factory=list)
    #: When group offsets come from the offset history: the round's time (epoch ms).
    groups_round: int | None = None
    #: The backed-up partitions of repartitioned topics (checked like the others; the tasks are in ``partitions``).
    merged_sources: list[PartitionPlan] = field(default_factory=list)

    def source_parts(self) -> list[PartitionPlan]:
        """One plan per backed-up partition restored, repartitioned or not."""
        return [part for part in self.partitions if part.repartition is None] + self.merged_sources


def restored_topics(settings: RestoreSettings) -> list[str]:
    """The backed-up topics the restore writes, checked with the options that name them (``--topics``,
    ``--topic-map``, ``--partitions``, ``--repartition``): refused before anything is registered or created."""
    available = list_topics(settings.source)
    if settings.selection is None:
        chosen = available
    else:
        chosen = settings.selection.select(available)
        if settings.selection.topics is not None:
            missing = [t for t in settings.selection.topics if t not in available]
            if missing:
                raise BackupNotFoundError(
                    f"topic(s) {', '.join(missing)} are not in the backup {settings.source} "
                    f"(it holds: {', '.join(available) or 'nothing'})"
                )
    unknown = [topic for topic in settings.topic_map if topic not in chosen]
    if unknown and settings.following is None:  # a follower maps topics the backup may gain later
        raise UsageError(f"--topic-map names topic(s) not being restored: {', '.join(unknown)}")
    if not chosen:
        raise BackupNotFoundError(f"no topic of the backup {settings.source} is selected")
    settings.check_target_names(chosen)
    settings.check_target_options(chosen)
    return chosen


def build_plan(settings: RestoreSettings, admin: Any) -> RestorePlan:
    """Check the backup and the target; decide each partition's starting point."""
    plan = RestorePlan()
    chosen = restored_topics(settings)
    existing = partition_counts(admin)
    historic = _historic_groups(settings)
    if historic is not None:
        plan.groups_round = historic[0]
    cut = checkpoints.read_checkpoint(settings.source, settings.checkpoint).ends if settings.checkpoint else None
    deleting = pending_deletions(settings.source)
    refuse_unfinished_erase(settings.source, chosen)
    for topic in chosen:
        topic_dir = settings.source / topic
        target = settings.target_topic(topic)
        wanted = settings.partitions.get(target)
        spread = settings.repartition_mode(target) != KEEP
        recorded = read_topic_record(settings.source, topic)
        origin = (recorded.cluster_id, recorded.topic_id) if recorded is not None else (None, None)
        first_part = len(plan.partitions)
        pruned_notes: list[str] = []
        for partition in list_partitions(topic_dir):
            reader = PartitionReader(topic_dir, partition, legacy=settings.legacy, keys=settings.keys)
            window = settings.window(topic, partition)
            if cut is not None:
                # Up to the checkpoint's cut: offsets below its end offset (none if the partition was not in it).
                last = cut.get((topic, partition), 0) - 1
                window = replace(window, to_offset=last if window.to_offset is None else min(last, window.to_offset))
            lost = lost_segments(settings.source, topic, partition, reader, deleting=deleting)
            # Checksums read every byte: on the driver only when asked to skip or to report (dry run);
            # otherwise each task checks its own partition before producing.
            # A repartitioned topic is read whole on the driver anyway (to count what goes where): checked first.
            checked = settings.skip_bad_segments or settings.dry_run or spread
            # A lost catalog costs nothing to find: refused here, before anything is created or produced.
            bad = (bad_segments if checked else unverifiable_segments)(
                settings.source, topic, partition, from_offset=window.from_offset, to_offset=window.to_offset,
                legacy=settings.legacy, keys=settings.keys,
            )  # fmt: skip
            if bad:
                window = replace(window, skip_segments=frozenset(segment.name for segment in bad))
            location = str(settings.source.resolve()) if isinstance(settings.source, Path) else str(settings.source)
            ids = _ids_part(settings, topic)
            identity = restore_identity(topic, partition, origin, location, window, schema_ids=ids)
            if settings.pass_ends is not None:
                # A follower's pass reads what the catalog held as committed when it began; every pass is the same
                # restore (the identity above), each going on from the marker the one before left.
                last = settings.pass_ends.get((topic, partition), 0) - 1
                window = replace(window, to_offset=last if window.to_offset is None else min(last, window.to_offset))
            plan.partitions.append(
                PartitionPlan(
                    topic,
                    partition,
                    target,
                    partition,
                    window,
                    # A follower's pass counts once it knows where the standby stands (_place, _start_where_needed):
                    # counted from the backup's first record, every pass would open every segment's index.
                    count_selected(reader, window) if settings.pass_ends is None else UNCOUNTED,
                    _restored_groups(
                        read_consumer_offsets(topic_dir, partition)
                        if historic is None
                        else {g: o[(topic, partition)] for g, o in historic[1].items() if (topic, partition) in o}
                    ),
                    bad_segments=lost + bad,
                    identity=identity,
                )
            )
            pruned_notes += _skipped_by_prune(settings, topic, partition, plan.partitions[-1].groups)
        count = _count_at_cut(settings, topic, recorded, cut, plan.partitions[first_part:])
        # Partitions added after the cut have nothing selected: the topic is restored as it was then.
        plan.partitions[first_part:] = [p for p in plan.partitions[first_part:] if p.source_partition < count]
        if wanted is not None and wanted < count and not spread:
            raise UsageError(
                f"--partitions {target}={wanted} is below the backup's {count_of(count, 'partition')} "
                "(--repartition murmur2 or round-robin spreads the records over fewer)"
            )
        if target in existing:
            if existing[target] < count and not spread:
                raise SparkKafkaBackupError(
                    f"target topic {target!r} has {count_of(existing[target], 'partition')}, "
                    f"the backup of {topic!r} has {count}: "
                    "records would not keep their partition (--repartition murmur2 or round-robin spreads them)"
                )
            plan.topics.append(TopicPlan(topic, target, existing[target], None, {}, *origin))
        else:
            choice = choose_configs(recorded.config if recorded else {}, settings.topic_configs,
                                    dropped=settings.drop_topic_config, given=settings.topic_config)  # fmt: skip
            config = {**choice.copied, **settings.topic_config}
            config, later = creation_config(config, restamp=settings.restamp)
            created = TopicPlan(topic, target, None, wanted or count, config, *origin, later)
            if recorded is None:
                created.no_config_because = "the backup recorded none"
            elif choice.skipped:
                created.no_config_because = "the backup's settings are left out, each said below"
            created.notes.extend(choice.describe_skipped(target))
            plan.topics.append(created)
        plan.topics[-1].notes.extend(pruned_notes)
        if spread:
            sources = plan.partitions[first_part:]
            del plan.partitions[first_part:]
            if not settings.skip_bad_segments and any(part.bad_segments for part in sources):
                plan.merged_sources.extend(sources)
                refuse_damage(plan, settings)
            target_count = existing.get(target) or wanted or count
            plan.merged_sources.extend(sources)
            plan.partitions.extend(_spread(settings, sources, target_count, origin))
    if not settings.dry_run:
        refuse_damage(plan, settings)
    _refuse_missing_keys(plan, settings)
    groups = (group for part in plan.partitions for group in part.groups)
    refuse_missing(admin, restore_permissions(plan.topics, groups), settings.client)
    _refuse_own_source(plan, settings, admin)
    _place(plan, settings, admin, existing)
    if settings.pass_ends is not None:
        _start_where_needed(plan, settings)
    _check_targets(plan, settings, admin)
    return plan


def _start_where_needed(plan: RestorePlan, settings: RestoreSettings) -> None:
    """A follower's pass reads each partition it has restored into from the first record it needs, not from the
    backup's first: its marker, or a consumer group's committed offset below it (placed among the records restored
    earlier). What a pass reads, checksums and checks against the target's limits is then what the backup added
    since the pass before, and the groups' span, however long the backup."""
    for part in plan.partitions:
        if part.repartition is not None or not part.has_marker:
            continue
        catalog = read_catalog(settings.source, part.source_topic, part.source_partition)
        pruned = catalog.pruned.last_offset if catalog is not None and catalog.pruned is not None else -1
        key = (part.target_topic, part.target_partition)
        settled = settings.settled_groups or {}
        for group, offset in sorted(part.groups.items()):
            if settled.get((group, part.source_topic, part.source_partition)) == offset:
                del part.groups[group]  # placed there by an earlier pass: not counted back again at every pass
            elif offset <= pruned and offset < part.resume_from and key in current_offsets(settings.client, group,
                                                                                            [key]):  # fmt: skip
                # At a record the standby holds and the backup let go of (prune --older-than): where an earlier pass
                # placed it stays (the backup cannot say where that record is any more, the standby still has it).
                del part.groups[group]
        start = min([part.resume_from, *part.groups.values()])
        reader = PartitionReader(
            settings.source / part.source_topic, part.source_partition, legacy=settings.legacy, keys=settings.keys
        )
        if part.window.from_offset is None or start > part.window.from_offset:
            part.window = replace(part.window, from_offset=start)
        part.selected = count_selected(reader, part.window)
        part.skip = count_selected(reader, part.window, below=part.resume_from)
        part.status = "already restored" if part.skip == part.selected else "resume"


def _count_at_cut(
    settings: RestoreSettings,
    topic: str,
    recorded: TopicRecord | None,
    cut: dict[tuple[str, int], int] | None,
    parts: list[PartitionPlan],
) -> int:
    """The partition count ``topic`` had at the restore's cut, not the directories the backup holds: a checkpoint's
    partitions, the recorded count at ``--to-time``, else the latest recorded (partitions added while the backup ran,
    empty ones too, are recorded; see :mod:`spark_kafka_backup.catalog.topics`). Never below a partition that has
    something to restore."""
    held = max((part.source_partition + 1 for part in parts), default=0)
    if cut is not None:
        in_cut = [partition for name, partition in cut if name == topic]
        count = max(in_cut) + 1 if in_cut else 0
    elif recorded is not None and settings.to_time is not None:
        count = recorded.partitions_at(settings.to_time)
    elif recorded is not None:
        count = max(recorded.partitions, held)
    else:
        count = held
    needed = max((part.source_partition + 1 for part in parts if part.selected or part.groups), default=0)
    return max(count, needed, 1)


def _spread(
    settings: RestoreSettings, sources: list[PartitionPlan], partitions: int, origin: tuple[str | None, str | None]
) -> list[PartitionPlan]:
    """The target partitions of a repartitioned topic, with what each receives (one pass over the topic)."""
    groups: dict[str, dict[int, int]] = {}
    for part in sources:
        for group, offset in part.groups.items():
            groups.setdefault(group, {})[part.source_partition] = offset
    topic, target = sources[0].source_topic, sources[0].target_topic
    readers = {
        p.source_partition: PartitionReader(
            settings.source / topic, p.source_partition, legacy=settings.legacy, keys=settings.keys
        )
        for p in sources
    }
    repartition = Repartition(
        settings.repartition_mode(target),
        partitions,
        tuple(Source(part.source_partition, _pinned(readers[part.source_partition], part.window)) for part in sources),
        groups,
    )
    rewrite = _column_rewrite(settings, topic)
    if rewrite is None or repartition.mode == ROUND_ROBIN:
        counts = count_targets(repartition, readers)  # from the keys alone
    else:
        counts, _ = count_routed_columns(repartition, readers, rewrite=rewrite, topic=topic)
    location = str(settings.source.resolve()) if isinstance(settings.source, Path) else str(settings.source)
    return [
        PartitionPlan(
            topic,
            -1,
            target,
            partition,
            Window(),
            counts[partition],
            dict.fromkeys(groups, 0),
            identity=restore_identity(
                topic, partition, origin, location, Window(), repartition.identity_part(), _ids_part(settings, topic)
            ),
            repartition=repartition,
        )
        for partition in range(partitions)
    ]


def _pinned(reader: PartitionReader, window: Window) -> Window:
    """The window bounded by what the partition holds now: a position in the merged stream must name the same
    record on every run, so records backed up later are left out, and a rerun after the backup grew past the
    window or lost its head (prune) has another identity and is refused, never placed differently."""
    held = [(s.first_offset, s.last_offset) for s in reader.summaries() if s.first_offset is not None]
    if not held:
        return replace(window, from_offset=0, to_offset=-1)
    first, last = held[0][0], held[-1][1]
    assert first is not None
    assert last is not None
    low = first if window.from_offset is None else max(first, window.from_offset)
    high = last if window.to_offset is None else min(last, window.to_offset)
    return replace(window, from_offset=low, to_offset=high)


def _check_targets(plan: RestorePlan, settings: RestoreSettings, admin: Any) -> None:
    """Refuse targets that would re-stamp, delete, reject or change the records still to produce; give created
    topics the settings that keep them (:mod:`spark_kafka_backup.restore.target_limits`,
    :mod:`spark_kafka_backup.restore.timestamp_type`).

    Topics with nothing left to produce (a finished restore run again) are not checked: there is nothing to refuse.
    """
    producing = {part.target_topic for part in plan.partitions if part.to_produce > 0}
    existing = [t.target_topic for t in plan.topics if t.create_partitions is None and t.target_topic in producing]
    effective = effective_topic_configs(admin, existing)
    pending = PendingTimestampTypes(settings.state_file("timestamp-types")).data
    broker: dict[str, str] | None = None
    choices = Choices(
        accept_retention_loss=settings.accept_retention_loss,
        allow_compacted_target=settings.allow_compacted_target,
        restamp_zero_timestamps=settings.restamp_zero_timestamps,
        given=frozenset(settings.topic_config),
    )
    problems = []
    for topic in plan.topics:
        if topic.create_partitions is None and topic.target_topic in pending:
            topic.set_timestamp_type = pending[topic.target_topic]  # created by an earlier run of this restore
        if topic.target_topic not in producing:
            continue
        if broker is None:
            broker = _broker_defaults(admin, creating=any(t.create_partitions is not None for t in plan.topics))
        created = topic.create_partitions is not None
        if created:
            defaults = broker_topic_defaults(broker)
            _override_broker_defaults(topic, defaults, restamp=settings.restamp)
            config = {**defaults, **topic.config}
        else:
            config = effective.get(topic.target_topic, {})
        restamped = config.get(TIMESTAMP_TYPE) == LOG_APPEND_TIME
        topic.restamped = restamped
        if restamped and not created and topic.set_timestamp_type is None and not settings.restamp:
            problems.append(
                f"target topic {topic.target_topic!r} has message.timestamp.type=LogAppendTime: the broker would "
                "give every restored record a new timestamp; restore into a new topic (created with CreateTime "
                "and set to LogAppendTime afterwards), or accept new timestamps with --restamp"
            )
            continue
        limits = TopicLimits.from_config(config)
        parts = [part for part in plan.source_parts() if part.target_topic == topic.target_topic]
        profiles = [_profile(settings, part, limits) for part in parts]
        whole = profiles[0] if len(profiles) == 1 else functools.reduce(RecordsProfile.merge, profiles)
        verdict = judge(
            topic.target_topic,
            topic.source_topic,
            config,
            whole,
            created=created,
            choices=choices,
            largest_partition_bytes=_largest_partition_bytes(plan, topic, profiles),
            now_ms=now_ms(),
            request_limit=request_limit(broker),
            restamped=restamped,
        )
        problems += verdict.problems
        topic.config.update(verdict.settings if created else {})
        topic.notes += verdict.notes
        topic.producer_message_bytes, topic.batch_limit = verdict.producer_message_bytes, verdict.batch_limit
    if problems:
        raise TargetLimitError("; ".join(problems) + "; nothing was produced")


def _broker_defaults(admin: Any, *, creating: bool) -> dict[str, str]:
    """The broker's configuration; a restore into existing topics alone goes on without it (Kafka's defaults for
    the request limit), since it needs no cluster-wide DESCRIBE_CONFIGS otherwise."""
    try:
        return broker_configs(admin)
    except ClusterError:
        if creating:
            raise
        return {}


def _override_broker_defaults(topic: TopicPlan, defaults: dict[str, str], *, restamp: bool) -> None:
    """A created topic gets the target broker's defaults for what the backup does not record (only settings made on
    the source topic itself are): a default of LogAppendTime would re-stamp every record, one of compact would
    compact a topic the source did not. Those are set to the source's kind (CreateTime, delete) and said."""
    if TIMESTAMP_TYPE not in topic.config and defaults.get(TIMESTAMP_TYPE) == LOG_APPEND_TIME and not restamp:
        topic.config[TIMESTAMP_TYPE] = "CreateTime"
        topic.notes.append(
            f"{topic.target_topic}: created with {TIMESTAMP_TYPE}=CreateTime: the target broker's default "
            "LogAppendTime would give every restored record a new timestamp (--restamp accepts that)"
        )
    policy = defaults.get("cleanup.policy", "delete")
    if "cleanup.policy" not in topic.config and "compact" in policy:
        topic.config["cleanup.policy"] = "delete"
        topic.notes.append(
            f"{topic.target_topic}: created with cleanup.policy=delete: the backup records no policy for it (the "
            f"source's default), and the target broker's default {policy} would compact restored records away"
        )


def _profile(settings: RestoreSettings, part: PartitionPlan, limits: TopicLimits) -> RecordsProfile:
    """What a backed-up partition's selected records are like, as ``limits`` see them."""
    reader = PartitionReader(
        settings.source / part.source_topic, part.source_partition, legacy=settings.legacy, keys=settings.keys
    )
    catalog = read_catalog(settings.source, part.source_topic, part.source_partition)
    size_limit = limits.max_message_bytes or PRODUCER_MESSAGE_BYTES
    window = part.window
    if settings.pass_ends is not None and part.has_marker:  # a follower's pass: only what it produces
        window = replace(window, from_offset=max(window.from_offset or 0, part.resume_from))
    return profile_partition(reader, window, catalog, keys=limits.compacted, size_limit=size_limit)


def _largest_partition_bytes(plan: RestorePlan, topic: TopicPlan, profiles: list[RecordsProfile]) -> int:
    """The most bytes the restore writes into one target partition of ``topic`` (stored bytes: above Kafka's)."""
    if not any(part.repartition is not None for part in plan.partitions if part.target_topic == topic.target_topic):
        return max((profile.stored_bytes for profile in profiles), default=0)
    # Repartitioned, keys decide where the bytes go (large records may share one): any partition may get them all.
    return sum(profile.stored_bytes for profile in profiles)


def _refuse_missing_keys(plan: RestorePlan, settings: RestoreSettings) -> None:
    """Refuse, before anything is produced, a restore of encrypted segments whose key was not given (the catalog
    names each encrypted segment's key id)."""
    given = {identity.hex() for identity in settings.keys.keys}
    for part in plan.source_parts():
        catalog = read_catalog(settings.source, part.source_topic, part.source_partition)
        window = part.window
        read = [
            e
            for e in (catalog.segments if catalog is not None else ())
            if e.name not in window.skip_segments
            and offsets_overlap(e.first_offset, e.last_offset, window.from_offset, window.to_offset)
        ]  # the segments the restore reads
        needed = sorted({e.key_id for e in read if e.key_id} - given)
        if needed:
            have = f"the key(s) given have id(s) {', '.join(sorted(given))}" if given else "no key was given"
            raise DecryptionKeyError(
                f"segments of {part.source_topic}/{part.source_partition} are encrypted with key id(s) "
                f"{', '.join(needed)}; {have} (--encryption-key-file FILE or --encryption-key-env VAR); "
                "nothing was produced"
            )
    if settings.keys.keys:  # what the keys do not vouch for is never produced (spark_kafka_backup.catalog.seals)
        unsealed: list[str] = []
        for topic, partition in sorted({(p.source_topic, p.source_partition) for p in plan.source_parts()}):
            reader = PartitionReader(settings.source / topic, partition, legacy=settings.legacy, keys=settings.keys)
            unsealed += seal_problems(settings.source, topic, partition, reader, settings.keys,
                                      unrecorded_ok=settings.allow_unauthenticated)  # fmt: skip
        if unsealed:
            raise DamagedBackupError(f"nothing was produced: {'; '.join(unsealed[:5])}"
                                     + (f" and {len(unsealed) - 5} more" if len(unsealed) > 5 else ""))  # fmt: skip


def refuse_damage(plan: RestorePlan, settings: RestoreSettings) -> None:
    """Raise unless every planned partition is whole, or ``--skip-bad-segments`` accepts leaving segments out."""
    if settings.skip_bad_segments:
        return
    found = [
        bad.describe(part.source_topic, part.source_partition)
        for part in plan.source_parts()
        for bad in part.bad_segments
    ]
    if found:
        raise DamagedBackupError(
            f"the backup is damaged, nothing was produced: {damage_text(found)} "
            "(--skip-bad-segments restores the rest and reports what was left out)"
        )


def _historic_groups(settings: RestoreSettings) -> tuple[int, dict[str, dict[tuple[str, int], int]]] | None:
    """Group offsets from a checkpoint or the offset history, when asked for (or implied by ``--to-time``)."""
    checkpoint = settings.checkpoint
    if checkpoint is None and settings.following is not None:
        checkpoint = settings.following.until_checkpoint  # a freeze: the groups as of its cut
    if checkpoint is not None:
        chosen = checkpoints.read_checkpoint(settings.source, checkpoint)
        if chosen.status != "completed":
            raise SparkKafkaBackupError(
                f"checkpoint {chosen.id} is {chosen.status}, not completed: it cannot be restored"
            )
        return chosen.taken_at or chosen.requested_at, chosen.groups
    if settings.groups_as_of is None and settings.to_time is not None:
        latest = checkpoints.latest_completed_before(settings.source, settings.to_time)
        if latest is not None:
            return latest.taken_at or latest.requested_at, latest.groups
    as_of = settings.groups_as_of
    if as_of is None and settings.to_time is not None and has_history(settings.source):
        as_of = settings.to_time
    if as_of is None:
        return None
    found = offsets_as_of(settings.source, as_of, topic_ids=_backed_up_ids(settings))
    if found is None:
        raise BackupNotFoundError(
            f"the backup {settings.source} has no consumer offset round at or before {iso_time(as_of)}"
        )
    return found


def _skipped_by_prune(settings: RestoreSettings, topic: str, partition: int, groups: dict[str, int]) -> list[str]:
    """One line per group whose committed offset lies at or below records a prune let go: the restore places it at
    the first record the backup still holds, past pruned records it had not read."""
    catalog = read_catalog(settings.source, topic, partition)
    pruned = catalog.pruned if catalog is not None else None
    if pruned is None:
        return []
    notes = []
    for group, offset in sorted(groups.items()):
        if offset > pruned.last_offset:
            continue
        skipped = f"all {pruned.records}" if offset <= pruned.first_offset else f"up to {pruned.records}"
        notes.append(
            f"group {group}: {topic}/{partition} committed at {offset}, but prune let go of offsets "
            f"{pruned.first_offset}..{pruned.last_offset} ({count_of(pruned.records, 'record')}) of the backup: the "
            f"group resumes at the first record after them and skips {skipped} of those records it had not read"
        )
    return notes


def _backed_up_ids(settings: RestoreSettings) -> dict[str, str]:
    """The topic id (incarnation) the backup holds of each of its topics that records one."""
    ids = {}
    for topic in list_topics(settings.source):
        record = read_topic_record(settings.source, topic)
        if record is not None and record.topic_id is not None:
            ids[topic] = record.topic_id
    return ids


def _restored_groups(groups: dict[str, int]) -> dict[str, int]:
    """The groups whose offsets the restore remaps (a restore's own progress markers are not restored)."""
    return {group: offset for group, offset in groups.items() if group != PROGRESS_GROUP}


def _refuse_own_source(plan: RestorePlan, settings: RestoreSettings, admin: Any) -> None:
    """A target topic that is the backed-up topic itself (same cluster id, same topic id) and still holds some of the
    backed-up offsets would get every backed-up record again, after the ones it still holds, and its groups' offsets
    mapped onto the copies, past records they have not read: refused, whatever ``--allow-non-empty`` says.
    ``--allow-restore-into-source`` restores anyway and leaves those topics' groups where they are on the source
    (never backwards, never past what they read)."""
    from spark_kafka_backup.kafka.cluster import cluster_identity

    candidates = [t for t in plan.topics if t.existing_partitions is not None and t.origin_topic_id is not None]
    if not candidates:
        return
    cluster_id, ids = cluster_identity(admin, [t.target_topic for t in candidates])
    own = [t for t in candidates if t.origin_cluster == cluster_id and ids.get(t.target_topic) == t.origin_topic_id]
    own = [t for t in own if _still_holds_backed_up(settings, admin, t)]
    if not own:
        return
    named = ", ".join(f"{t.target_topic} (topic id {t.origin_topic_id})" for t in own)
    if not settings.allow_into_source:
        raise TargetNotEmptyError(
            f"the target is the backup's own source: cluster {cluster_id}, topic(s) {named} are the very topics "
            "the backup was read from, so every backed-up record would be appended again after the ones they still "
            "hold; restore into other topics (--topic-map) or another cluster, or, to append them anyway, "
            "--allow-restore-into-source --allow-non-empty (consumer groups are then left where they are)"
        )
    into = {t.target_topic for t in own}
    for part in plan.partitions:
        if part.target_topic in into and part.groups:
            part.groups = {}
    for topic in own:
        topic.notes.append(
            f"{topic.target_topic} is the backup's own source topic (--allow-restore-into-source): its records are "
            "appended again, and its consumer groups are left where they are"
        )


def _still_holds_backed_up(settings: RestoreSettings, admin: Any, topic: TopicPlan) -> bool:
    """Whether the backup's own source topic still holds an offset the backup holds, in some partition (one emptied
    by retention or ``delete_records`` is restored into as any target: nothing would be there twice)."""
    source = settings.source / topic.source_topic
    partitions = [p for p in list_partitions(source) if p < (topic.existing_partitions or 0)]
    earliest = list_offsets(admin, [(topic.target_topic, p) for p in partitions], latest=False)
    for partition in partitions:
        last = PartitionReader(source, partition, legacy=settings.legacy, keys=settings.keys).last_offset()
        if last is not None and earliest.get((topic.target_topic, partition), 0) <= last:
            return True
    return False


def _place(plan: RestorePlan, settings: RestoreSettings, admin: Any, existing: dict[str, int]) -> None:
    """Decide each partition's starting point from the target's current state.

    A restore's own marker (:mod:`spark_kafka_backup.restore.marker`) says exactly which
    records are there. Without one, a partition whose records are all aborted
    (a first run killed before its first commit) is empty, and one holding a
    prefix of the selected records is an older spark-kafka-backup's restore (one offset
    per record) that this one goes on after.
    """
    on_target = [(p.target_topic, p.target_partition) for p in plan.partitions if p.target_topic in existing]
    earliest = list_offsets(admin, on_target, latest=False)
    latest = list_offsets(admin, on_target, latest=True, read_committed=False)
    consumer = marker_consumer(settings.client)
    try:
        markers = read_markers(consumer, on_target, timeout=PLAN_MARKER_SECONDS)
    finally:
        consumer.close()
    problems = []
    lost: list[str] = []  # an earlier run's records no longer there: never counted as restored
    # Unless the restore accepts retention deleting restored records: then they are said, and the rerun goes on. A
    # standby's topics have the source's retention: what it deletes at their head a follower takes as the source's.
    retained: list[str] | None = [] if settings.accept_retention_loss or settings.following is not None else None
    for part in plan.partitions:
        key = (part.target_topic, part.target_partition)
        part.target_start, part.target_end = earliest.get(key, 0), latest.get(key, 0)
        marker = markers.get(key)
        if part.repartition is not None:
            if marker is not None and marker.restore == part.identity:
                lost.extend(missing_records([key], markers, {key: part.identity}, earliest, latest, head_loss=retained))
            problem = _place_spread(settings, part, marker)
            if problem:
                problems.append(problem)
            continue
        reader = PartitionReader(
            settings.source / part.source_topic, part.source_partition, legacy=settings.legacy, keys=settings.keys
        )
        if marker is not None and marker.restore == part.identity:
            part.resume_from, part.baseline, part.after_last = marker.resume_from, marker.first, marker.next
            part.has_marker = True
            lost.extend(missing_records([key], markers, {key: part.identity}, earliest, latest, head_loss=retained))
            if part.selected == UNCOUNTED:  # a follower's pass: counted from where it reads (_start_where_needed)
                ahead = replace(part.window, from_offset=max(marker.resume_from, part.window.from_offset or 0))
                part.status = "resume" if count_selected(reader, ahead) else "already restored"
                continue
            part.skip = count_selected(reader, part.window, below=marker.resume_from)
            part.status = "already restored" if part.skip == part.selected else "resume"
            continue
        if part.selected == UNCOUNTED:
            part.selected = count_selected(reader, part.window)
        part.replaces = marker.restore if marker is not None else None
        held = part.target_end - part.target_start
        part.after_last = part.target_end
        prefix = _committed_prefix(settings, part, reader) if held else (0, 0, 0)
        if prefix is not None and prefix[0] == 0:
            part.baseline, part.status = part.target_end, "empty"
        elif prefix is not None:
            count, first_offset, last_offset = prefix
            part.baseline, part.skip, part.after_last = first_offset, count, last_offset + 1
            last = nth_selected(reader, part.window, count - 1)
            part.resume_from = last.offset + 1 if last is not None else 0
            part.status = "already restored" if count == part.selected else "resume"
        elif settings.allow_non_empty:
            part.baseline, part.status = part.target_end, "after existing records"
        else:
            # Offsets, not records: a transactional producer's markers take offsets too.
            problems.append(f"{part.target_topic}/{part.target_partition} (offsets {part.target_start}.."
                            f"{part.target_end - 1})")  # fmt: skip
    said = retained if settings.following is None else None  # a follower would say them again at every pass
    refuse_lost(lost, said, what="records an earlier run of this restore produced are no longer in the target",
                then="they cannot be counted as restored; restore into a new or emptied topic")  # fmt: skip
    _count_resumed(settings, [p for p in plan.partitions if p.repartition is not None and p.status == "resume"])
    problems.extend(_written_since(settings, [p for p in plan.partitions if p.has_marker and p.status == "resume"]))
    if problems:
        way_on = (
            "restore into empty partitions, or add --allow-non-empty to restore after those records (consumer "
            "offsets are then remapped onto the new positions)"
            if settings.following is None
            else FOLLOWER_WAY_ON
        )
        raise TargetNotEmptyError(
            "target partition(s) already hold records that are not an earlier run of this restore: "
            + ", ".join(problems)
            + f"; {way_on}"
        )


def _count_resumed(settings: RestoreSettings, parts: list[PartitionPlan]) -> None:
    """How many of their records resumed repartitioned target partitions hold: one pass per topic."""
    by_topic: dict[str, list[PartitionPlan]] = {}
    for part in parts:
        by_topic.setdefault(part.target_topic, []).append(part)
    for topic_parts in by_topic.values():
        repartition = topic_parts[0].repartition
        assert repartition is not None
        source = settings.source / topic_parts[0].source_topic
        readers = {s.partition: PartitionReader(source, s.partition, legacy=settings.legacy, keys=settings.keys)
                   for s in repartition.sources}  # fmt: skip
        _, below = count_routed_columns(
            repartition,
            readers,
            below={p.target_partition: p.resume_from for p in topic_parts},
            rewrite=_column_rewrite(settings, topic_parts[0].source_topic),
            topic=topic_parts[0].source_topic,
        )
        for part in topic_parts:
            part.skip = below[part.target_partition]
            part.status = "already restored" if part.skip == part.selected else "resume"


def _written_since(settings: RestoreSettings, parts: list[PartitionPlan]) -> list[str]:
    """The partitions this restore goes on in whose target holds committed records past its progress: its own all
    lie below its marker's next offset, so someone else wrote them while it was stopped, and going on would put the
    rest of the restore after them. Aborted records and transaction markers (a stopped run's) do not count; nor do
    a run of this same restore's (its marker, read again, has moved past them: it is taken over as usual). With
    ``--allow-non-empty`` the restore goes on after them, and says so; else each is a problem."""
    found: list[str] = []
    for part in parts:
        if part.target_end <= part.after_last:
            continue  # nothing past this restore's records but what the marker's transaction left
        from spark_kafka_backup.kafka.cluster import nth_committed_record

        key = (part.target_topic, part.target_partition)
        first = nth_committed_record(settings.client, part.target_topic, part.target_partition, part.after_last, 0)
        if first is None:
            continue  # aborted transactions only
        consumer = marker_consumer(settings.client)
        try:
            moved = read_markers(consumer, [key], timeout=PLAN_MARKER_SECONDS).get(key)
        finally:
            consumer.close()
        if moved is not None and moved.restore == part.identity and moved.next > first[0]:
            continue  # another run of this restore wrote them (and goes on, until this one fences it)
        where = f"{part.target_topic}/{part.target_partition} (from offset {first[0]})"
        if settings.allow_non_empty:
            log.warning("%s holds records this restore did not write, after its progress: it goes on after them "
                        "(--allow-non-empty)", where)  # fmt: skip
            continue
        found.append(f"{where}, written after this restore's progress while it was stopped")
    return found


def _place_spread(settings: RestoreSettings, part: PartitionPlan, marker: ProgressMarker | None) -> str | None:
    """A repartitioned target partition's starting point: its marker, or empty (a problem otherwise)."""
    assert part.repartition is not None
    if marker is not None and marker.restore == part.identity:
        part.resume_from, part.baseline, part.after_last = marker.resume_from, marker.first, marker.next
        part.has_marker = True
        part.status = "resume"  # skip and status set by _count_resumed, in one pass per topic
        return None
    part.replaces = marker.restore if marker is not None else None
    part.after_last = part.baseline = part.target_end
    if part.target_end == part.target_start:
        return None
    from spark_kafka_backup.kafka.cluster import nth_committed_record

    if nth_committed_record(settings.client, part.target_topic, part.target_partition, part.target_start, 0) is None:
        return None  # aborted transactions only
    if settings.allow_non_empty:
        part.status = "after existing records"
        return None
    return f"{part.target_topic}/{part.target_partition} ({count_of(part.target_end - part.target_start, 'record')})"


def _committed_prefix(
    settings: RestoreSettings, part: PartitionPlan, reader: PartitionReader
) -> tuple[int, int, int] | None:
    """How the committed records of a target partition without this restore's marker stand.

    ``(0, 0, 0)``: none (empty, or aborted transactions only). ``(count, first offset, last offset)``: they are
    the first ``count`` selected records (a restore whose marker expired with the group's offsets, or an older
    spark-kafka-backup's restore): the first and last are compared record by record. ``None``: something else. Reads the
    partition's committed records, stopping at the first when it is not this restore's.
    """
    from spark_kafka_backup.kafka.cluster import read_committed_records

    records = read_committed_records(settings.client, part.target_topic, part.target_partition, part.target_start)
    produced = _produced_form(settings, part.source_topic) or (lambda record, _: record)
    try:
        first = next(records, None)
        if first is None:
            return 0, 0, 0
        expected = nth_selected(reader, part.window, 0)
        if expected is None or not same_record(produced(expected, part.source_partition), first[1]):
            return None
        count, last = 1, first
        for found in records:
            count, last = count + 1, found
            if count > part.selected:
                return None
    finally:
        records.close()
    expected = nth_selected(reader, part.window, count - 1)
    if expected is None or not same_record(produced(expected, part.source_partition), last[1]):
        return None
    return count, first[0], last[0]


def _ids_part(settings: RestoreSettings, topic: str) -> dict[str, Any] | None:
    """The schema id rewrite's part of the restore's identity (``None`` without one)."""
    rewrite = settings.id_rewrite(topic)
    return rewrite.identity_part() if rewrite is not None and rewrite.rewrites else None


def _column_rewrite(settings: RestoreSettings, topic: str) -> ColumnIdRewrite | None:
    """The schema id rewrite of ``topic``'s records, on columns (``None`` without one)."""
    rewrite = settings.id_rewrite(topic)
    return ColumnIdRewrite(rewrite) if rewrite is not None else None


def _produced_form(settings: RestoreSettings, topic: str) -> Callable[[Record, int], Record] | None:
    """How a stored record of ``topic`` (and partition) is produced, when that is not as stored (schema ids)."""
    rewrite = settings.id_rewrite(topic)
    if rewrite is None:
        return None
    return lambda record, partition: rewrite.record(record, topic=topic, partition=partition)
