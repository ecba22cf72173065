"""Merging a partition's small finished segments into segments of the configured size (``spark-kafka-backup merge``).

A backup on an object store writes new segments every micro-batch; a continuous backup that runs for weeks leaves
thousands of small ones, each a request (or two) for every reader. Merging rewrites runs of consecutive small
segments as one segment whose bytes are the same records, in the same order, with the segment index shifted to the
new positions: nothing is decoded or re-encoded, so the backup is identical record by record before and after.

What is merged, per partition: consecutive **finished, cataloged** segments (the newest segment of a partition,
which a backup may still extend, never), grouped from the oldest while their plain records add up to at most the
target size (``--max-segment-size``, the backup's default 1 GiB); a group of one is left alone. Each source segment's
two files must match the checksums in the catalog, or the merge refuses (a damaged segment is not copied into a new
one that would then look sound).

The merged segment is named ``segment_partition_PPP_from_offset_N_merged_G`` after the first replaced segment's
start offset (:mod:`spark_kafka_backup.format.naming`): the first segment it replaces keeps its own name until the
switch, and a reader following the partition index sees either the old segments or the new one, never both.

Crash safety (``kill -9`` anywhere), per group:

1. ``STATE/merge-intent.json`` names the partition, the segments being replaced and the merged segment's name.
2. The merged records and index files are written beside the old ones under temporary names, synced (compressed and
   sealed like the sources), then renamed to their final names.
3. The partition index is replaced (one atomic rename, or one object PUT): it now names the merged segment.
4. The catalog entry of the merged segment replaces those of the old ones.
5. The old segments' files are deleted, then the intent.

A later ``spark-kafka-backup merge`` (or ``prune``, which shares the lease) finds a leftover intent and finishes it:
forwards (steps 4 and 5) if the partition index names the merged segment, otherwise backwards (the merged files are
deleted and the old segments stay). Until then ``verify`` reports the segments of the intent as pending, not as damage.

Beside a running backup: on local and shared file systems steps 3 and 4 happen under the partition writer's lock, like a
prune's, and segments the backup finished in the meantime are kept as they are. On an object store the merge holds
the target's lease and is refused while a backup runs. A restore reading the backup while it is merged may find a
replaced segment gone and stop with one line; run merges between restores.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from spark_kafka_backup.catalog.build import describe_segment, file_crc32c
from spark_kafka_backup.catalog.model import SegmentEntry
from spark_kafka_backup.catalog.prune import partition_locked
from spark_kafka_backup.catalog.seals import pinned_names
from spark_kafka_backup.catalog.store import read_catalog, write_catalog
from spark_kafka_backup.errors import ChecksumError, DecryptionKeyError, FormatError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.magic import MAGIC_V1
from spark_kafka_backup.format.naming import INDEX_SUFFIX, RECORDS_SUFFIX, rewritten_name
from spark_kafka_backup.format.partition_index import PartitionIndexEntry, encode_partition_index
from spark_kafka_backup.format.segment_index import ENTRY_DTYPE
from spark_kafka_backup.fsutil import TMP_SUFFIX, disk_error, fsync_dir
from spark_kafka_backup.partition.layout import list_partitions
from spark_kafka_backup.partition.merge_intent import MergeIntent, intent_path, pending_intent, write_intent
from spark_kafka_backup.partition.object_writer import SPOOL_DIR_ENV
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.records_file import NO_KEYS, compress_records_file, open_records
from spark_kafka_backup.partition.segment_reader import SegmentIndexFile
from spark_kafka_backup.progress import Progress
from spark_kafka_backup.storage import Location, exists, storage_for
from spark_kafka_backup.storage.removals import Removals

#: Plain bytes copied per read.
CHUNK = 8 << 20

#: Segment index entries shifted per step.
ENTRIES_PER_STEP = 1 << 16


@dataclass(frozen=True)
class MergeGroup:
    """Consecutive segments of one partition to be replaced by one merged segment named ``merged``."""

    topic: str
    partition: int
    sources: tuple[SegmentEntry, ...]
    merged: str

    @property
    def records(self) -> int:
        return sum(entry.records for entry in self.sources)

    @property
    def plain_bytes(self) -> int:
        """The merged records file's plain size (one magic byte, then every source's records)."""
        return 1 + sum(_plain_size(entry) - 1 for entry in self.sources)

    def intent(self) -> MergeIntent:
        """What the merge of this group writes down before it starts."""
        return MergeIntent(self.topic, self.partition, tuple(entry.name for entry in self.sources), self.merged)


def _plain_size(entry: SegmentEntry) -> int:
    return entry.plain_bytes if entry.plain_bytes is not None else entry.records_bytes


def plan_merge(root: Location, topics: list[str], *, max_segment_size: int) -> list[MergeGroup]:
    """The groups a merge would write, oldest first per partition (see the module docstring)."""
    groups: list[MergeGroup] = []
    for topic in topics:
        for partition in list_partitions(root / topic):
            groups.extend(_plan_partition(root, topic, partition, max_segment_size))
    return groups


def _plan_partition(root: Location, topic: str, partition: int, max_segment_size: int) -> list[MergeGroup]:
    catalog = read_catalog(root, topic, partition)
    if catalog is None:
        return []
    reader = PartitionReader(root / topic, partition)
    cataloged = {entry.name: entry for entry in catalog.segments}
    # A run never spans a cataloged segment the partition no longer has (a lost one): merged over, its loss would
    # sit inside one segment that the catalog describes as whole.
    place = {entry.name: number for number, entry in enumerate(sorted(catalog.segments, key=lambda e: e.start_offset))}
    pinned = pinned_names(root, topic, partition)  # kept as the seal record knows them
    groups: list[MergeGroup] = []
    run: list[SegmentEntry] = []

    def close_run() -> None:
        if len(run) > 1:
            first = run[0]
            groups.append(MergeGroup(topic, partition, tuple(run), _merged_name(partition, first)))
        run.clear()

    for segment in reader.segments[:-1]:  # the newest may still grow
        entry = cataloged.get(segment.name)
        if entry is None or entry.start_offset != segment.start_offset or segment.name in pinned:
            close_run()
            continue
        size = sum(_plain_size(e) - 1 for e in run) + _plain_size(entry)
        if run and (size > max_segment_size or place[entry.name] != place[run[-1].name] + 1):
            close_run()
        run.append(entry)
    close_run()
    return groups


def _merged_name(partition: int, first: SegmentEntry) -> str:
    return rewritten_name(partition, first.name, first.start_offset)


def merge(
    root: Location,
    groups: list[MergeGroup],
    *,
    progress: bool = False,
    keys: KeyRing = NO_KEYS,
    removals: Removals | None = None,
) -> None:
    """Carry out a plan, group by group (see the module docstring for the order of steps); ``keys``: those sealed
    segments are read and the merged one sealed with; ``removals`` gathers what a versioned or locked bucket keeps
    of the replaced segments."""
    shown = Progress("merge", len(groups), "segments written", enabled=progress)
    for group in groups:
        topic_dir = root / group.topic
        for entry in group.sources:
            check_source(topic_dir, entry)
        kek = _sealing_key(topic_dir, group, keys)
        write_intent(root, group.intent())
        try:
            _write_merged(root, group, kek, keys)
        except BaseException:
            finish_intent(root, keys, removals)  # backwards: the partition index does not name the merged segment yet
            raise
        try:
            _switch(root, group)
        except BaseException:
            finish_intent(root, keys, removals)  # backwards if the partition index changed under the plan
            raise
        finish_intent(root, keys, removals)
        shown.advance(note=f"{group.topic}/{group.partition}: {len(group.sources)} segments into {group.merged}")
    shown.close()


def _sealing_key(topic_dir: Location, group: MergeGroup, keys: KeyRing) -> bytes | None:
    """The key-encryption key the merged segment is sealed with: the sources' (``None``: they are not sealed)."""
    sealing = next((entry.key_id for entry in reversed(group.sources) if entry.key_id), None)  # the newest key
    if sealing is None:
        return None
    for entry in group.sources:
        if entry.key_id is not None and bytes.fromhex(entry.key_id) not in keys.keys:
            raise DecryptionKeyError(
                f"{topic_dir / (entry.name + RECORDS_SUFFIX)}: is encrypted with key id {entry.key_id}; merging "
                f"needs that key (--encryption-key-file or --encryption-key-env): {group.sources[0].name} and the "
                "segments after it are not merged"
            )
    return keys.keys[bytes.fromhex(sealing)]


def _write_merged(root: Location, group: MergeGroup, kek: bytes | None, keys: KeyRing) -> None:
    """Step 2: the merged segment's files under their final names, complete and synced."""
    topic_dir = root / group.topic
    codec = next((entry.compression for entry in reversed(group.sources) if entry.compression), None)
    write_segment(
        topic_dir, group.merged, lambda records, index: _concatenate(topic_dir, group, keys, records, index),
        codec=codec, kek=kek, writing=group.plain_bytes,
    )  # fmt: skip


def write_segment(
    topic_dir: Location,
    name: str,
    fill: Callable[[Path, Path], None],
    *,
    codec: str | None,
    kek: bytes | None,
    writing: int | None = None,
) -> None:
    """A segment rewritten from others (merged, or without erased records) under its final ``name``, complete and
    synced: ``fill`` writes its plain records and index files (local, synced), which are then compressed with
    ``codec`` and sealed with ``kek`` as its sources were, and given their names, the index first (a records file
    under its final name marks the segment complete). Beside the topic's files on disk; through a local spool on an
    object store."""
    spool = (
        topic_dir
        if isinstance(topic_dir, Path)
        else Path(tempfile.mkdtemp(prefix="spark-kafka-backup-rewrite-", dir=os.environ.get(SPOOL_DIR_ENV)))
    )
    tag = f".{name}.{os.getpid()}"
    records_tmp = spool / f"{tag}{RECORDS_SUFFIX}{TMP_SUFFIX}"
    index_tmp = spool / f"{tag}{INDEX_SUFFIX}{TMP_SUFFIX}"
    try:
        fill(records_tmp, index_tmp)
        if codec is not None or kek is not None:
            compress_records_file(records_tmp, codec or "none", encryption_key=kek)
        final_records = topic_dir / (name + RECORDS_SUFFIX)
        final_index = topic_dir / (name + INDEX_SUFFIX)
        if isinstance(final_records, Path) and isinstance(final_index, Path):
            os.replace(index_tmp, final_index)
            os.replace(records_tmp, final_records)
            fsync_dir(spool)
        else:
            storage = storage_for(topic_dir)
            storage.upload(final_index, index_tmp)
            storage.upload(final_records, records_tmp)
    except OSError as exc:
        raise disk_error(exc, records_tmp, writing=writing) from exc
    finally:
        for path in (records_tmp, index_tmp):
            with suppress(OSError):
                path.unlink()
        if spool != topic_dir:
            shutil.rmtree(spool, ignore_errors=True)


def check_source(topic_dir: Location, entry: SegmentEntry, *, doing: str = "merged") -> None:
    """Refuse a segment whose files are not the ones its catalog entry describes (missing, resized or changed)."""
    for suffix, expected, size in (
        (RECORDS_SUFFIX, entry.records_crc32c, entry.records_bytes),
        (INDEX_SUFFIX, entry.index_crc32c, entry.index_bytes),
    ):
        path = topic_dir / (entry.name + suffix)
        if not exists(path):
            raise ChecksumError(f"{path}: missing; the catalog records it ({size} bytes): not {doing}")
        found, found_size = file_crc32c(path)
        if (found, found_size) != (expected, size):
            raise ChecksumError(
                f"{path}: {found_size} bytes with CRC32C {found:08x}, the catalog recorded {size} bytes with "
                f"{expected:08x}: damaged, not {doing} (spark-kafka-backup verify {topic_dir.parent} says more)"
            )


def _concatenate(topic_dir: Location, group: MergeGroup, keys: KeyRing, records_tmp: Path, index_tmp: Path) -> None:
    """The plain records of every source after one magic byte, and their index entries moved to match."""
    position = 1
    previous_last = -1
    with open(records_tmp, "wb") as records_out, open(index_tmp, "wb") as index_out:
        records_out.write(MAGIC_V1)
        index_out.write(MAGIC_V1)
        for entry in group.sources:
            records_path = topic_dir / (entry.name + RECORDS_SUFFIX)
            index_path = topic_dir / (entry.name + INDEX_SUFFIX)
            with SegmentIndexFile(index_path) as index:
                count = index.count
                if count != entry.records:
                    raise FormatError(f"holds {count} index entries, the catalog {entry.records}", file=str(index_path))
                end = index.entry(count - 1).end if count else 1
                for start in range(0, count, ENTRIES_PER_STEP):
                    step = min(ENTRIES_PER_STEP, count - start)
                    entries = np.frombuffer(index.read_entries(start, step), dtype=ENTRY_DTYPE).copy()
                    if step and int(entries["offset"][0]) <= previous_last:
                        raise FormatError(
                            f"offset {int(entries['offset'][0])} does not follow {previous_last}", file=str(index_path)
                        )
                    previous_last = int(entries["offset"][-1]) if step else previous_last
                    entries["position"] += position - 1
                    index_out.write(entries.tobytes())
            stored = open_records(records_path, keys)
            try:
                plain = stored.size
                if plain != end:
                    raise FormatError(
                        f"records end at byte {end} by the segment index but the file holds {plain} plain bytes",
                        file=str(records_path),
                    )
                at = 1
                while at < end:
                    piece = stored.pread(min(CHUNK, end - at), at)
                    if not piece:
                        raise FormatError("ends early", file=str(records_path), position=at)
                    records_out.write(piece)
                    at += len(piece)
            finally:
                stored.close()
            position += end - 1
        records_out.flush()
        index_out.flush()
        os.fsync(records_out.fileno())
        os.fsync(index_out.fileno())


def _switch(root: Location, group: MergeGroup) -> None:
    """Step 3: the partition index names the merged segment in place of the sources (as it is now: a backup may
    have added segments since the plan)."""
    topic_dir = root / group.topic
    names = [entry.name for entry in group.sources]
    with partition_locked(topic_dir, group.topic, group.partition) as held:
        segments = PartitionReader(topic_dir, group.partition).segments
        at = next((i for i, s in enumerate(segments) if s.name == names[0]), None)
        if at is None or [s.name for s in segments[at : at + len(names)]] != names or at + len(names) >= len(segments):
            raise FormatError(
                f"no longer names {names[0]}..{names[-1]} as finished segments in a row (changed since the plan?)",
                file=str(topic_dir),
            )
        merged = PartitionIndexEntry(group.merged, segments[at].start_offset)
        held.replace_index(encode_partition_index([*segments[:at], merged, *segments[at + len(names) :]]))


def finish_intent(root: Location, keys: KeyRing = NO_KEYS, removals: Removals | None = None) -> bool:
    """Complete a recorded merge (idempotent); return whether there was one.

    Backwards while the partition index still names every replaced segment (the switch did not happen): the merged
    files go. Otherwise forwards: the switch happened (the merged segment may even be pruned since), so the catalog
    loses the replaced segments and gains the merged one if it is named, and the replaced segments' files go, never
    one the partition index names.
    """
    path = intent_path(root)
    intent = pending_intent(root)
    if intent is None:
        return False
    removals = removals if removals is not None else Removals()
    topic, partition, names, merged = intent.topic, intent.partition, intent.segments, intent.merged
    topic_dir = root / topic
    storage = storage_for(root)
    if storage.list_files(topic_dir) is None:  # the topic was deleted since: nothing left to finish
        storage.delete(path)
        return True
    with partition_locked(topic_dir, topic, partition):
        reader = PartitionReader(topic_dir, partition, keys=keys)
        named = {segment.name for segment in reader.segments}
        at = next((i for i, s in enumerate(reader.segments) if s.name == merged), None)
        if at is None and all(name in named for name in names):
            doomed = [merged]
            if isinstance(topic_dir, Path):
                for leftover in topic_dir.glob(f".{merged}.*{TMP_SUFFIX}"):  # a write killed midway
                    leftover.unlink(missing_ok=True)
        else:
            doomed = [name for name in names if name not in named]
            entry = describe_segment(reader, at) if at is not None else None
            catalog = read_catalog(root, topic, partition)
            if catalog is not None and any(e.name in doomed or e.name == merged for e in catalog.segments):
                kept = [e for e in catalog.segments if e.name not in doomed and e.name != merged]
                if entry is not None:
                    kept.append(entry)
                kept.sort(key=lambda e: e.start_offset)
                if tuple(kept) != catalog.segments:
                    write_catalog(root, replace(catalog, segments=tuple(kept)))
            elif catalog is not None and entry is not None:
                write_catalog(root, replace(catalog, segments=tuple(sorted(
                    (*catalog.segments, entry), key=lambda e: e.start_offset))))  # fmt: skip
        for name in doomed:
            # The records file last: a merged segment whose records file has its final name is complete.
            for suffix in (INDEX_SUFFIX, RECORDS_SUFFIX) if name != merged else (RECORDS_SUFFIX, INDEX_SUFFIX):
                removals.remove(topic_dir / f"{name}{suffix}")
        if isinstance(topic_dir, Path):
            fsync_dir(topic_dir)
    storage.delete(path)
    if isinstance(path, Path):
        fsync_dir(path.parent)
    return True
