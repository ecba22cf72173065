"""Restoring one backed-up partition into one target partition (runs on a Spark executor).

The task starts a transactional producer for its target partition
(:mod:`spark_kafka_backup.restore.marker`), which fences any other restore writing there,
then reads the partition's progress marker *after* fencing: that, not the
plan, says where to go on. It reads the selected records in offset order,
skips those below the marker's source offset (already in the target), and
produces the rest to the target partition in transactions of
:data:`~spark_kafka_backup.restore.marker.TRANSACTION_RECORDS` records, keeping key,
value, headers (order and duplicates) and timestamp. Each transaction commits
its records together with the advanced marker, so after any crash the target
holds exactly the records below the marker, each once.

A task fenced by a newer restore of the same partition stops producing and
returns ``fenced`` (not an exception: Spark would retry it and fence the newer
one back).

A transactional call that hangs costs one producer, not the task: see
:mod:`spark_kafka_backup.restore.producer_calls`.

The transactions are written once (:mod:`spark_kafka_backup.restore.transaction_run`), on Arrow columns, against
a producer interface with two implementations: the native edge's, a batch per call with no Python object per
record (:class:`~spark_kafka_backup.kafka.columnar_producer.ColumnarProducer`), and confluent-kafka's, one call per
record (:class:`~spark_kafka_backup.restore.reference_producer.ReferenceProducer`), the reference and the fallback
where the native edge is not built or ``KBACKUP_KAFKA_EDGE=reference``. Either does everything a task does: time
windows, repartitioned target partitions, schema ids rewritten, rate limits.

Memory: the reader's batches (up to 8 MiB of records, and their columns as
the producer takes them) plus the producer's queue (bounded by
``queue.buffering.max.kbytes``), whatever the partition's size.

Consumer groups: a group committed at source offset C resumes, on the target,
at the first restored record at or after C (or after the last restored
record). That record's target offset comes from its delivery report when this
run produces it, and from reading the target (``read_committed``, counting
records from the marker's first offset) when an earlier run did.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from spark_kafka_backup.catalog.integrity import bad_segments
from spark_kafka_backup.errors import ChecksumError, DeliveryError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.fsutil import restrict_new_files
from spark_kafka_backup.kafka.columnar import native_edge
from spark_kafka_backup.kafka.columnar_producer import ColumnarProducer
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.records_file import load_keys
from spark_kafka_backup.partition.selection import Window
from spark_kafka_backup.restore import producer_calls as calls
from spark_kafka_backup.restore.fanout import Abandoned, fan_out
from spark_kafka_backup.restore.partition_task import (
    NATIVE_PRODUCER,
    REFERENCE_PRODUCER,
    PartitionResult,
    PartitionTask,
)
from spark_kafka_backup.restore.producer_calls import StuckProducerError, producer_settings
from spark_kafka_backup.restore.reference_producer import ReferenceProducer
from spark_kafka_backup.restore.staging import Staged, staged_topic_dir
from spark_kafka_backup.restore.stream_columns import Chunk
from spark_kafka_backup.restore.transaction_run import restore_transactions
from spark_kafka_backup.schema_registry.wire_columns import ColumnIdRewrite
from spark_kafka_backup.spark.stack_dumps import stacks_if_slow
from spark_kafka_backup.spark.worker_gc import freeze_loaded_objects
from spark_kafka_backup.storage import Location, parse_location

__all__ = [
    "PartitionResult",
    "PartitionTask",
    "producer_settings",
    "restore_bundle",
    "restore_bundle_sharing",
    "restore_partition",
    "restore_partition_sharing",
]

_task_log = logging.getLogger("spark_kafka_backup.restore")

#: :func:`~spark_kafka_backup.restore.transaction_run.restore_transactions` with its producer chosen.
Run = Callable[..., PartitionResult]


def restore_partition_sharing(rewrites: Any, matches: Any, task: PartitionTask) -> PartitionResult:
    """:func:`restore_partition`, the task's schema id rewrite taken from ``rewrites``: a Spark broadcast of
    ``{source topic: IdRewrite}``, which reaches each executor once, where a map of a registry's every id shipped with
    each task would cost its size once per task (10 MB for a million ids); ``None`` without rewrites. ``matches``
    likewise: ``{(topic, partition): MatchedRuns}`` of ``--where``, which each task of a repartitioned topic needs
    for every source partition."""
    return restore_partition(_shared(rewrites, matches, task))


def restore_bundle_sharing(
    rewrites: Any, matches: Any, done: Any, bundle: list[PartitionTask]
) -> list[PartitionResult]:
    """:func:`restore_bundle`, with the broadcasts of :func:`restore_partition_sharing`; adds the target partitions
    restored to ``done`` (a Spark accumulator: the driver's progress)."""
    results = restore_bundle([_shared(rewrites, matches, task) for task in bundle])
    done.add(len(results))
    return results


def _shared(rewrites: Any, matches: Any, task: PartitionTask) -> PartitionTask:
    found = rewrites.value.get(task.source_topic) if rewrites is not None else None
    if matches is not None:
        task = task.with_matches(matches.value)
    return task if found is None else replace(task, id_rewrite=found)


def restore_partition(task: PartitionTask) -> PartitionResult:
    """Produce the task's records; return what was done and the groups' new offsets."""

    started_at = time.time()
    freeze_loaded_objects()
    restrict_new_files(task.umask)
    keys = load_keys(task.key_sources)  # read where the task runs: key material never crosses in a pickle
    with stacks_if_slow(), contextlib.ExitStack() as stack:
        staged = _staged_sources(task, keys, stack)
        run, producer_name = _producer_path(task)
        result = _result(task, producer_name, started_at)
        return _with_attempts(task, _readers(task, staged, keys), run, result)


def restore_bundle(bundle: list[PartitionTask]) -> list[PartitionResult]:
    """Produce several target partitions of one repartitioned topic from one read of its backed-up partitions
    (:mod:`spark_kafka_backup.restore.fanout`); each target's transactions, fence, marker and result are those
    :func:`restore_partition` gives it. A target whose producer got stuck goes on alone with new producers."""
    if len(bundle) == 1:
        return [restore_partition(bundle[0])]
    first = bundle[0]
    if first.repartition is None or any(
        task.repartition != first.repartition or task.source_topic != first.source_topic
        or task.id_rewrite != first.id_rewrite for task in bundle
    ):  # fmt: skip
        raise ValueError("a bundle holds target partitions of one repartitioned topic")
    started_at = time.time()
    freeze_loaded_objects()
    restrict_new_files(first.umask)
    keys = load_keys(first.key_sources)
    tasks = {task.target_partition: task for task in bundle}
    with stacks_if_slow(), contextlib.ExitStack() as stack:
        staged = _staged_sources(first, keys, stack)
        run, producer_name = _producer_path(first)
        results = {target: _result(task, producer_name, started_at) for target, task in tasks.items()}
        rewrite = ColumnIdRewrite(first.id_rewrite) if first.id_rewrite is not None else None

        def work(target: int, chunks: Iterator[Chunk | None]) -> PartitionResult:
            return run(tasks[target], {}, results[target], chunks=chunks, rewrite=rewrite, sharing=len(bundle))

        outcomes = fan_out(first.repartition, _readers(first, staged, keys), list(tasks), work, rewrite=rewrite,
                           topic=first.source_topic, leaving=(StuckProducerError,))  # fmt: skip
        failures = [o for o in outcomes.values() if isinstance(o, BaseException) and not isinstance(o, Abandoned)]
        failure = next((o for o in failures if not isinstance(o, StuckProducerError)), None)
        if failure is not None:
            raise failure
        done = []
        for target, task in tasks.items():
            outcome = outcomes[target]
            if isinstance(outcome, StuckProducerError):
                where = f"topic {task.target_topic!r} partition {task.target_partition}"
                _task_log.warning("%s: %s; going on with a new producer", where, outcome)
                started = _result(task, producer_name, started_at)
                outcome = _with_attempts(task, _readers(task, staged, keys), run, started, first_attempt=2,
                                         stuck=str(outcome))  # fmt: skip
            assert isinstance(outcome, PartitionResult)
            done.append(outcome)
        return done


def _result(task: PartitionTask, producer: str, started_at: float) -> PartitionResult:
    return PartitionResult(
        task.source_topic, task.source_partition, task.target_topic, task.target_partition,
        started_at=started_at, producer=producer,
    )  # fmt: skip


def _staged_sources(task: PartitionTask, keys: KeyRing, stack: contextlib.ExitStack) -> dict[int, Location]:
    """Each backed-up partition the task reads: where its files are (staged, for an object-storage backup), its
    cataloged segments checked first."""
    found = {}
    for partition, window in task.sources():
        staged = stack.enter_context(
            staged_topic_dir(parse_location(task.source_dir), partition, window, legacy=task.legacy)
        )
        _check_segments(task, partition, window, staged, keys)
        found[partition] = staged.topic_dir
    return found


def _readers(task: PartitionTask, staged: dict[int, Location], keys: KeyRing) -> dict[int, PartitionReader]:
    return {partition: PartitionReader(topic_dir, partition, legacy=task.legacy, keys=keys)
            for partition, topic_dir in staged.items()}  # fmt: skip


def _with_attempts(
    task: PartitionTask,
    readers: dict[int, PartitionReader],
    run: Run,
    result: PartitionResult,
    *,
    first_attempt: int = 1,
    stuck: str = "",
) -> PartitionResult:
    """``run`` the task, with a new producer (and a new result) after one got stuck, up to
    :data:`~spark_kafka_backup.restore.producer_calls.PRODUCER_ATTEMPTS` producers."""
    where = f"topic {task.target_topic!r} partition {task.target_partition}"
    for attempt in range(first_attempt, calls.PRODUCER_ATTEMPTS + 1):
        try:
            done = run(task, readers, result)
            if attempt > 1:
                done.taken_over = None  # the progress found was this task's own earlier producer's
            return done
        except StuckProducerError as exc:
            stuck = str(exc)
            if attempt < calls.PRODUCER_ATTEMPTS:
                _task_log.warning("%s: %s; going on with a new producer", where, stuck)
            result = _result(task, result.producer, result.started_at)
    raise DeliveryError(
        f"{where}: the target cluster did not complete a transaction with {calls.PRODUCER_ATTEMPTS} producers "
        f"(last: {stuck}); what was committed stays, run the restore again"
    )


def _producer_path(task: PartitionTask) -> tuple[Run, str]:
    """The transactions through the native edge's producer where it is built and not turned off, else through
    confluent-kafka's; and the producer's name."""
    if native_edge() is None:
        return functools.partial(restore_transactions, producer=ReferenceProducer), REFERENCE_PRODUCER
    return functools.partial(restore_transactions, producer=_native_producer), NATIVE_PRODUCER


def _native_producer(settings: dict[str, str], group_metadata: object) -> ColumnarProducer:
    return ColumnarProducer(settings)  # the native producer names the progress group itself


def _check_segments(task: PartitionTask, partition: int, window: Window, staged: Staged, keys: KeyRing) -> None:
    """Refuse to produce from a partition whose cataloged segments fail their checksums.

    Segments the plan chose to leave out (``--skip-bad-segments``) and segments outside the offset window are
    not checked: they are not read.
    """
    topic_dir = parse_location(task.source_dir)
    found = bad_segments(
        topic_dir.parent,
        task.source_topic,
        partition,
        from_offset=window.from_offset,
        to_offset=window.to_offset,
        files=staged.topic_dir,
        only=staged.names,
        legacy=task.legacy,
        keys=keys,
    )
    for bad in found:
        if bad.name in window.skip_segments:
            continue
        raise ChecksumError(
            f"topic {task.source_topic!r} partition {partition}: segment {bad.name} "
            f"({bad.offsets}) is damaged: {bad.reason}; nothing was produced "
            "from this partition (--skip-bad-segments restores the rest and reports what was left out)"
        )
