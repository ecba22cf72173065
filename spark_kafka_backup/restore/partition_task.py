"""What one restore task is given (:class:`PartitionTask`, picklable) and what it returns (:class:`PartitionResult`),
with the checks both of its producers make the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from spark_kafka_backup.errors import TargetChangedError, TargetLimitError
from spark_kafka_backup.format.record import Record
from spark_kafka_backup.partition.selection import MatchedRuns, Window, same_record
from spark_kafka_backup.restore.marker import ProgressMarker, read_markers
from spark_kafka_backup.restore.repartition import Repartition
from spark_kafka_backup.restore.throttle import Throttle
from spark_kafka_backup.schema_registry.wire import IdRewrite

T = TypeVar("T")


@dataclass(frozen=True)
class PartitionTask:
    """Everything a restore task needs (picklable)."""

    source_dir: str
    source_topic: str
    source_partition: int
    target_topic: str
    target_partition: int
    window: Window
    #: The restore's name for this partition's records (see :func:`spark_kafka_backup.restore.marker.restore_identity`).
    identity: str
    #: Source offset to go on from when the target holds no marker (the selected records below it are there,
    #: committed, from target offset ``baseline`` on: a restore whose marker expired, or an older spark-kafka-backup's);
    #: 0 when the target holds none of them.
    resume_from: int
    baseline: int
    #: The target offset after the last record already there (where a group past every record goes).
    after_last: int
    #: Another restore's marker identity the plan found and accepted to replace (empty target, --allow-non-empty).
    replaces: str | None
    groups: dict[str, int]
    client: dict[str, str]
    batch_size: int
    #: This task's part of the restore's rate limits (see :mod:`spark_kafka_backup.restore.throttle`).
    throttle: Throttle = field(default_factory=Throttle)
    legacy: bool = False
    #: The umask of the files the task creates (its staged copy of an object-storage backup).
    umask: int | None = None
    #: Set for a target partition of a repartitioned topic (``source_partition`` is then -1, ``groups`` only names
    #: the groups, and positions of the merged stream replace source offsets:
    #: :mod:`spark_kafka_backup.restore.repartition`).
    repartition: Repartition | None = None
    #: Where this task reads the key-encryption keys of encrypted segments: (file path, variable name) pairs.
    key_sources: tuple[tuple[str | None, str | None], ...] = ()
    #: The schema ids the records' keys and values get in the target registry (``--schema-registry``).
    id_rewrite: IdRewrite | None = None
    #: The producer's ``message.max.bytes``: at least the largest record (the plan measured it).
    message_bytes: int = 1_000_000
    #: ``--restamp-zero-timestamps``: a record stamped 0 is produced with the restore's time (else refused).
    restamp_zero: bool = False
    #: ``--allow-non-empty``: records others wrote past this restore's progress are gone on after, not refused.
    allow_non_empty: bool = False
    #: A follower's pass (``restore --follow``): produce nothing once the standby was failed over.
    stop_when_failed_over: bool = False
    #: A follower's pass or failover: a group whose record the standby no longer holds (its retention or compaction
    #: took it) is left where it is, said in the result, instead of failing the pass.
    leave_unplaceable_groups: bool = False

    def matches(self) -> dict[tuple[str, int], MatchedRuns]:
        """The ``--where`` runs of the backed-up partitions this task reads (none without ``--where``)."""
        return {
            (self.source_topic, partition): window.matched
            for partition, window in self.sources()
            if window.matched is not None
        }

    def with_matches(self, matches: Mapping[tuple[str, int], MatchedRuns | None]) -> PartitionTask:
        """This task with each source's ``--where`` runs set from ``matches`` (those it names; ``None`` takes them
        out): a repartitioned topic's tasks would otherwise each carry every source partition's runs."""

        def matched(partition: int, window: Window) -> Window:
            key = (self.source_topic, partition)
            return replace(window, matched=matches[key]) if key in matches else window

        if self.repartition is None:
            return replace(self, window=matched(self.source_partition, self.window))
        sources = tuple(replace(source, window=matched(source.partition, source.window))
                        for source in self.repartition.sources)  # fmt: skip
        return replace(self, repartition=replace(self.repartition, sources=sources))

    def sources(self) -> list[tuple[int, Window]]:
        """The backed-up partitions this task reads, with their selections."""
        if self.repartition is None:
            return [(self.source_partition, self.window)]
        return [(source.partition, source.window) for source in self.repartition.sources]

    def group_positions(self) -> dict[int, list[tuple[int, str]]]:
        """Per backed-up partition, ``(committed offset, group)`` in offset order: a group is placed at the first
        record of that partition at or past its offset (or of any partition, repartitioned, whichever comes first)."""
        if self.repartition is None:
            return {self.source_partition: sorted((offset, group) for group, offset in self.groups.items())}
        found: dict[int, list[tuple[int, str]]] = {}
        for group, offsets in self.repartition.groups.items():
            for source in self.repartition.sources:
                # No offset stored on a partition: every record there is unread.
                found.setdefault(source.partition, []).append((offsets.get(source.partition, -1), group))
        return {partition: sorted(items) for partition, items in found.items()}

    def rewritten(self, record: Record, partition: int) -> Record:
        """``record`` of backed-up ``partition`` as it is produced: with the target registry's schema ids."""
        if self.id_rewrite is None:
            return record
        return self.id_rewrite.record(record, topic=self.source_topic, partition=partition)


@dataclass
class PartitionResult:
    source_topic: str
    source_partition: int
    target_topic: str
    target_partition: int
    selected: int = 0
    produced: int = 0
    produced_bytes: int = 0
    #: Selected records found already in the target when the task started.
    skipped: int = 0
    started_at: float = 0.0  # wall clock, seconds since the epoch
    ended_at: float = 0.0
    end_offset: int = 0
    group_offsets: dict[str, int] = field(default_factory=dict)
    #: Set when a newer restore of the same target partition fenced this one: why it stopped.
    fenced: str | None = None
    #: Set when this task found another restore's progress beyond its plan and went on from there.
    taken_over: str | None = None
    #: Repartitioned: per group, records after its new offset that it had read on the source (read again).
    read_again: dict[str, int] = field(default_factory=dict)
    #: Which producer the task produced through (:data:`NATIVE_PRODUCER` or :data:`REFERENCE_PRODUCER`).
    producer: str = ""
    #: Groups a follower's pass could not place (``leave_unplaceable_groups``), and why.
    unplaced: dict[str, str] = field(default_factory=dict)


#: The producers a task may produce through, as the job's summary names them.
NATIVE_PRODUCER = "the native Kafka edge"
REFERENCE_PRODUCER = "confluent-kafka"


def foreign_marker(marker: ProgressMarker | None, task: PartitionTask, where: str) -> ProgressMarker | None:
    """This restore's marker (``None`` when there is none, or the plan accepted replacing another restore's)."""
    if marker is None or marker.restore == task.replaces:
        return None
    if marker.restore != task.identity:
        raise TargetChangedError(
            f"{where} now holds another restore's records (written after this restore was planned); "
            "nothing was produced there by this run"
        )
    return marker


def fence(
    task: PartitionTask, consumer: Any, start_producer: Callable[[], None], result: PartitionResult
) -> ProgressMarker | None:
    """Start the partition's transactional producer (``start_producer``, which fences any other holding its id)
    between two reads of the partition's progress marker; this restore's marker, read after fencing.

    Read before fencing, a marker of another restore is refused without stopping the one that wrote it; read
    after, it says what the fenced producer committed until then, which is what counts (noted in ``result`` when
    another run of this restore had got further than the plan).
    """
    where = f"topic {task.target_topic!r} partition {task.target_partition}"
    key = (task.target_topic, task.target_partition)
    foreign_marker(read_markers(consumer, [key]).get(key), task, where)
    # A follower looks for a failover before fencing (not to fence the failover's producer) and after (a failover
    # that began meanwhile: its producers started before ours were fenced by ours, it runs again).
    _stop_if_failed_over(task, consumer)
    start_producer()
    _stop_if_failed_over(task, consumer)
    marker = foreign_marker(read_markers(consumer, [key]).get(key), task, where)
    if marker is not None and not task.allow_non_empty:
        _refuse_written_since(task, marker, where)
    if marker is not None and marker.resume_from > task.resume_from:
        result.taken_over = (
            f"{where}: another restore of the same records had reached {position_name(task)} "
            f"{marker.resume_from}; this one went on from there"
        )
    return marker


def _stop_if_failed_over(task: PartitionTask, consumer: Any) -> None:
    if not task.stop_when_failed_over:
        return
    from spark_kafka_backup.restore.failover_mark import read_mark
    from spark_kafka_backup.restore.producer_calls import FencedError

    mark = read_mark(task.client, [task.target_topic], asking=consumer)
    if mark is not None:
        raise FencedError(f"the standby was {mark.describe()}: this follower produces no more")


#: What a follower whose standby holds records of someone else's can do: they stay where they are (Kafka deletes
#: only from a partition's head), and a standby is the backup's records alone.
FOLLOWER_WAY_ON = (
    "a standby holds the backup's records alone: follow into a new standby (other topics with --topic-map, or "
    "another cluster); --allow-non-empty goes on after them, and the standby then holds records the backup does not"
)


def _refuse_written_since(task: PartitionTask, marker: ProgressMarker, where: str) -> None:
    """Refuse to go on where the target holds a committed record past this restore's progress: its own all lie below
    the marker's next offset, and the producer just fenced can write no more (its open transaction was aborted), so
    someone else wrote it while the restore was stopped (the plan finds those it can see; a stopped run's open
    transaction hides the ones after it until it is aborted, here)."""
    from spark_kafka_backup.kafka.cluster import nth_committed_record

    first = nth_committed_record(task.client, task.target_topic, task.target_partition, marker.next, 0)
    if first is not None:
        way_on = (
            "restore into a new or emptied topic, or add --allow-non-empty to go on after it"
            if not task.stop_when_failed_over
            else FOLLOWER_WAY_ON
        )
        raise TargetChangedError(
            f"{where}: the target holds a record at offset {first[0]} that this restore did not write, past its "
            f"progress (written while it was stopped); {way_on}"
        )


def earlier_offset(
    task: PartitionTask, marker: ProgressMarker | None, nth: int, expected: Record, *, from_end: int | None = None
) -> int:
    """Target offset of the ``nth`` selected record (``expected``, as produced), produced by an earlier run.

    With this restore's marker and ``from_end`` (how many of the records the earlier runs restored lie from it to
    their last, itself included), counted back among the committed records from the marker's ``next``: the cost is
    those records alone, and records the target let go at its head since (retention on a standby) do not matter.
    Otherwise counted among the committed records from the restore's first one. Either way checked to be that
    record: records deleted or compacted away since would otherwise move a group past records it had not read.
    """
    from spark_kafka_backup.kafka.cluster import committed_record_before, nth_committed_record

    where = f"topic {task.target_topic!r} partition {task.target_partition}"
    if marker is not None and from_end is not None:
        found = committed_record_before(task.client, task.target_topic, task.target_partition, marker.next, from_end)
        place = f"the {from_end}th record back from target offset {marker.next}"
    else:
        first = marker.first if marker is not None else task.baseline
        found = nth_committed_record(task.client, task.target_topic, task.target_partition, first, nth)
        place = f"the {nth + 1}th record from target offset {first}"
    if found is None or not same_record(expected, found[1]):
        raise TargetChangedError(
            f"{where}: the restored record of source offset {expected.offset} is not where the restore left it "
            f"({place}): records were deleted or compacted since, so consumer group offsets cannot be placed; "
            "restore into a new topic"
        )
    return int(found[0])


def zero_stamped(task: PartitionTask, source: int, offset: int) -> TargetLimitError:
    """A record stamped 0 the plan did not see (backed up since): librdkafka would give it the restore's time."""
    return TargetLimitError(
        f"topic {task.source_topic!r} partition {source} offset {offset} is stamped 0 "
        "(1970-01-01T00:00:00.000Z): librdkafka, the producer under spark-kafka-backup, sends 0 as 'now', so it would "
        "come "
        "back with the restore's time; what is committed stays, run the restore again with "
        "--restamp-zero-timestamps to accept that"
    )


def position_name(task: PartitionTask) -> str:
    """What the marker's number counts, for messages."""
    return "source offset" if task.repartition is None else "position"
