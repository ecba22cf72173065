"""Retention: deleting old segments no retained checkpoint needs.

What may go, per partition: a **prefix** of its finished, cataloged segments
(the oldest ones, contiguous, so what remains has no holes), each of which

- is older than the cutoff (``--older-than``: its newest record timestamp is
  before it; segments without timestamps are kept), and
- is not needed by a retained checkpoint. A checkpoint needs the records its
  consumer groups had not consumed yet: every segment holding an offset at or
  above the lowest committed offset of any group in its cut (or, with no group
  on the partition, at or above the cut's end offset) and below that end.
- without a cutoff, is not needed by the backup's latest state: every offset
  at or above the newest retained checkpoint's end (the partition's whole
  backup when no retained checkpoint has it) or the lowest offset a group has
  committed in the latest stored consumer offsets. Only an age
  (``--older-than``) lets the latest state go.
- is not held by a live standby follower: every offset at or above the next
  one it restores (:mod:`spark_kafka_backup.catalog.holds`), with or without a cutoff.

Retained checkpoints: the newest N completed ones with ``--keep-checkpoints N``
(older checkpoints are deleted), otherwise every completed one.

Crash safety: the deletion is first written down as an intent
(``STATE/prune-intent.json``), then the partition index and the catalog are
replaced without the segments, then their files are deleted, then the intent.
A later prune finishes a leftover intent first; ``verify`` reports the files
of an unfinished intent as pending deletion, not as damage.

Beside a running backup: on local and shared file systems each partition is
changed under the partition writer's lock (:func:`~spark_kafka_backup.partition.writer.lock_partition_index`),
so a batch writing the partition finishes first and the next one opens the
updated partition index. Two prunes exclude each other with the target's
``prune-lease``. On an object store, where writers take no lock, prune holds
the target's lease itself and is refused while a backup runs
(:mod:`spark_kafka_backup.storage.lease`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from spark_kafka_backup.catalog import checkpoints
from spark_kafka_backup.catalog.holds import Hold, live_holds
from spark_kafka_backup.catalog.model import PartitionCatalog, PrunedPrefix, SegmentEntry
from spark_kafka_backup.catalog.seals import pinned_names
from spark_kafka_backup.catalog.store import read_catalog, write_catalog
from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.format.naming import (
    INDEX_SUFFIX,
    RECORDS_SUFFIX,
    check_partition,
    check_segment_name,
    check_topic_name,
)
from spark_kafka_backup.format.partition_index import encode_partition_index
from spark_kafka_backup.fsutil import atomic_write_locked, fsync_dir
from spark_kafka_backup.partition.layout import list_partitions, partition_index_path, state_dir
from spark_kafka_backup.partition.lock import lock_partition_index
from spark_kafka_backup.partition.merge_intent import pending_merge
from spark_kafka_backup.partition.offsets_file import read_consumer_offsets
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.progress import Progress
from spark_kafka_backup.storage import Location, exists, read_document, storage_for, write_whole
from spark_kafka_backup.storage.lease import TargetLease
from spark_kafka_backup.storage.removals import Removals


def intent_path(root: Location) -> Location:
    """Where an unfinished prune's intent is written down."""
    return state_dir(root) / "prune-intent.json"


@dataclass(frozen=True)
class PrunedSegment:
    topic: str
    partition: int
    entry: SegmentEntry


def plan_prune(
    root: Location,
    topics: list[str],
    *,
    cutoff_ms: int | None,
    keep_checkpoints: int | None,
    holds: list[Hold] | None = None,
) -> tuple[list[PrunedSegment], list[checkpoints.Checkpoint]]:
    """The segments that may go, and the checkpoints that go with ``keep_checkpoints``; ``holds``: the live
    followers' holds (read here when not given)."""
    if holds is None:
        holds = live_holds(root)[0]
    completed = [c for c in checkpoints.list_checkpoints(root) if c.status == "completed"]
    completed.sort(key=lambda c: c.id)
    retained = completed[-keep_checkpoints:] if keep_checkpoints else completed
    dropped = [c for c in completed if c not in retained] if keep_checkpoints else []
    doomed: list[PrunedSegment] = []
    for topic in topics:
        for partition in list_partitions(root / topic):
            catalog = read_catalog(root, topic, partition)
            if catalog is None:
                continue
            needs = [_needed_from(c, topic, partition) for c in retained]
            if cutoff_ms is None:
                needs.append((_latest_need(root, topic, partition, retained), _NO_END))
            held = [hold.needs_from(topic, partition) for hold in holds]
            needs += [(offset, _NO_END) for offset in held if offset is not None]
            named = PartitionReader(root / topic, partition).segments
            newest = named[-1].name if named else None
            pinned = pinned_names(root, topic, partition, plain=False)
            for entry in catalog.segments:
                # The newest segment stays (on an object store it is cataloged too): it tells a restarted backup
                # where the partition ends; so does the newest sealed one the seal record names
                # (spark_kafka_backup.catalog.seals).
                if entry.name == newest or entry.name in pinned or not _may_go(entry, cutoff_ms, needs):
                    break  # only a prefix goes
                doomed.append(PrunedSegment(topic, partition, entry))
    return doomed, dropped


#: The end of the latest state's need: above every offset.
_NO_END = 1 << 63


def _latest_need(root: Location, topic: str, partition: int, retained: list[checkpoints.Checkpoint]) -> int:
    """The lowest offset the backup's latest state needs: what came after the newest retained checkpoint's cut, and
    what the groups of the latest stored consumer offsets had not consumed."""
    newest_end = retained[-1].ends.get((topic, partition), 0) if retained else 0
    return min([newest_end, *read_consumer_offsets(root / topic, partition).values()])


def _needed_from(checkpoint: checkpoints.Checkpoint, topic: str, partition: int) -> tuple[int, int]:
    end = checkpoint.ends.get((topic, partition), 0)
    committed = [offsets[(topic, partition)] for offsets in checkpoint.groups.values() if (topic, partition) in offsets]
    return (min([*committed, end]), end)


def _may_go(entry: SegmentEntry, cutoff_ms: int | None, needs: list[tuple[int, int]]) -> bool:
    if cutoff_ms is not None and (entry.max_timestamp is None or entry.max_timestamp >= cutoff_ms):
        return False
    last = entry.last_offset if entry.last_offset is not None else entry.start_offset - 1
    first = entry.first_offset if entry.first_offset is not None else entry.start_offset
    return all(last < low or first >= end for low, end in needs)


def prune(
    root: Location,
    doomed: list[PrunedSegment],
    dropped: list[checkpoints.Checkpoint],
    *,
    progress: bool = False,
    removals: Removals | None = None,
) -> None:
    """Carry out a plan (see the module docstring for the order of steps); ``removals`` gathers what a versioned or
    locked bucket keeps of the deleted files."""
    if not doomed and not dropped:
        return
    intent = {
        "segments": [[s.topic, s.partition, s.entry.name] for s in doomed],
        "checkpoints": [c.id for c in dropped],
    }
    write_whole(intent_path(root), json.dumps(intent).encode())
    finish_intent(root, progress=progress, removals=removals)


def finish_intent(root: Location, *, progress: bool = False, removals: Removals | None = None) -> bool:
    """Complete a recorded prune (idempotent); return whether there was one."""
    path = intent_path(root)
    if not exists(path):
        return False
    removals = removals if removals is not None else Removals()
    segments, checkpoint_ids = read_intent(path)
    storage = storage_for(root)
    by_partition: dict[tuple[str, int], set[str]] = {}
    for topic, partition, name in segments:
        by_partition.setdefault((topic, partition), set()).add(name)
    shown = Progress("prune", len(by_partition), "partitions", enabled=progress)
    for (topic, partition), names in by_partition.items():
        topic_dir = root / topic
        with partition_locked(topic_dir, topic, partition) as held:
            reader = PartitionReader(topic_dir, partition)
            kept = [segment for segment in reader.segments if segment.name not in names]
            if len(kept) != len(reader.segments):
                held.replace_index(encode_partition_index(kept))
            catalog = read_catalog(root, topic, partition)
            if catalog is not None and any(entry.name in names for entry in catalog.segments):
                entries = tuple(entry for entry in catalog.segments if entry.name not in names)
                write_catalog(root, replace(catalog, segments=entries, pruned=_pruned(catalog, names)))
            for name in names:
                for suffix in (RECORDS_SUFFIX, INDEX_SUFFIX):
                    removals.remove(topic_dir / f"{name}{suffix}")
            if isinstance(topic_dir, Path):
                fsync_dir(topic_dir)
        shown.advance(note=f"{topic}/{partition}: {len(names)} segment(s) deleted")
    shown.close()
    for checkpoint_id in checkpoint_ids:
        removals.remove(checkpoints.checkpoint_path(root, checkpoint_id))
    storage.delete(path)
    if isinstance(path, Path):
        fsync_dir(path.parent)
    return True


#: How long prune waits for a backup's batch to finish writing a partition.
WRITER_WAIT_SECONDS = 900.0


class _LockedPartition:
    """A partition held under the writer's lock; a replaced partition index is locked before it is in place."""

    def __init__(self, path: Location) -> None:
        self.path = path
        self.fds: list[int] = []

    def replace_index(self, data: bytes) -> None:
        if not isinstance(self.path, Path):
            write_whole(self.path, data)
            return
        # Locked before it takes the name: a writer that opens the new file waits for this prune to finish the
        # partition (catalog, deletions) instead of finding it unlocked.
        self.fds.append(atomic_write_locked(self.path, data))


@contextmanager
def partition_locked(topic_dir: Location, topic: str, partition: int) -> Iterator[_LockedPartition]:
    """Hold the partition writer's lock (local and shared file systems; object stores have none)."""
    path = partition_index_path(topic_dir, partition)
    held = _LockedPartition(path)
    if isinstance(path, Path) and path.exists():
        held.fds.append(lock_partition_index(path, timeout=WRITER_WAIT_SECONDS, topic=topic, partition=partition))
    try:
        yield held
    finally:
        for fd in held.fds:
            os.close(fd)


def _pruned(catalog: PartitionCatalog, names: set[str]) -> PrunedPrefix | None:
    """The catalog's pruned range extended by its segments ``names`` (in the same write that drops them)."""
    pruned = catalog.pruned
    for entry in catalog.segments:
        first, last = entry.first_offset, entry.last_offset
        if entry.name not in names or first is None or last is None:
            continue  # kept, or empty
        pruned = (
            PrunedPrefix(first, last, entry.records) if pruned is None else pruned.extended(first, last, entry.records)
        )
    return pruned


def prune_lease(root: Location) -> TargetLease:
    """The lease a prune holds: its own on a file system (a backup may run), the target's on an object store."""
    if isinstance(root, Path):
        return TargetLease(state_dir(root), "prune", name="prune-lease")
    return TargetLease(state_dir(root), "prune")


def pending_deletions(root: Location) -> set[tuple[str, int, str]]:
    """Segments an unfinished prune is deleting, and those an unfinished merge is replacing or writing."""
    pending = pending_merge(root)
    path = intent_path(root)
    if not exists(path):
        return pending
    return pending | set(read_intent(path)[0])


def read_intent(path: Location) -> tuple[list[tuple[str, int, str]], list[int]]:
    """A prune intent's segments (topic, partition, name) and checkpoint ids, every name checked against the
    layout's grammar before anything is deleted (a FormatError naming the file otherwise)."""
    file = str(path)
    document = read_document(path, MAX_INTENT_BYTES, what="prune intent")
    try:
        segments = []
        for topic, partition, name in document["segments"]:
            segments.append((check_topic_name(topic, file=file), check_partition(partition, file=file),
                             check_segment_name(name, file=file)))  # fmt: skip
        checkpoint_ids = [number for number in document["checkpoints"] if _is_checkpoint_id(number, file)]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise FormatError(f"not a valid prune intent ({type(exc).__name__}: {exc})", file=file) from exc
    return segments, checkpoint_ids


def _is_checkpoint_id(number: object, file: str) -> bool:
    if isinstance(number, bool) or not isinstance(number, int) or not 0 < number < 10**15:
        raise FormatError("not a checkpoint id", file=file, expected="a positive integer", found=repr(number)[:80])
    return True


#: The largest intent a prune reads back (one entry per segment to delete).
MAX_INTENT_BYTES = 64 << 20
