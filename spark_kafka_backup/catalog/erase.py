"""Erasing records from a backup (``spark-kafka-backup erase``), for data-protection requests.

The command chooses the records (a key, or a predicate Spark evaluates) and hands this module, per partition, the
offset ranges that cover them. Every segment holding one of them is rewritten without them: the other records'
bytes are copied as they are, in the same order, with a new segment index; the replacement is compressed and sealed
as the segment was, under the next generation of its name (:func:`~spark_kafka_backup.format.naming.rewritten_name`).
The newest segment of a backup on disk, which the backup appends to, is rewritten too, and stays plain: every record
its index lists is looked at and copied (its committed prefix, and records a writer killed before it recorded its
prefix left indexed, which a backup would keep), and the catalog's committed prefix then covers them. Segment files
the partition index does not name could hold records to erase: the erase is refused while there are any. The
offsets of the erased records are recorded as erased on purpose (:mod:`spark_kafka_backup.catalog.erasures`);
nothing records what they held.

Crash safety (``kill -9`` anywhere), per partition:

1. ``STATE/erase-intent.json`` names the partition, each segment being replaced with its replacement's name, and
   the offsets being erased.
2. Each replacement's two files are written under temporary names, synced, compressed and sealed, then given their
   names: the index first, the records file last (its name marks the replacement complete).
3. The partition index is replaced (one atomic rename, or one object PUT): it names the replacements.
4. The replaced segments' files are deleted.
5. The erasure record gains the erased offsets.
6. The catalog describes the replacements (the newest one by its committed prefix); an encrypted partition's seal
   record names them. Then the intent is deleted.
7. On a versioned or locked bucket a delete leaves the bytes as a kept version: every earlier version of the
   partition's segment files is deleted for good (:func:`purge_partition`); the versions a lock keeps are reported
   (:mod:`spark_kafka_backup.storage.retention`), and the command says so and fails.

:func:`finish_erase` completes an interrupted erase: forwards (4 to 6) when the partition index names the
replacements, backwards when it names none of them (their files are deleted: nothing was erased), and refuses
anything else (the partition changed in a way no erase leaves). The next ``erase``,
``merge`` or ``prune`` runs it first, and so does the backup job when it starts; until then ``verify`` reports it and
``restore`` refuses the backup. An erase holds the target's lease: it is refused while a backup, a prune or a merge
runs, and they while it runs.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from spark_kafka_backup.catalog.build import describe_segment, describe_tail
from spark_kafka_backup.catalog.erasures import add_erasure
from spark_kafka_backup.catalog.merge import check_source, write_segment
from spark_kafka_backup.catalog.model import PartitionCatalog
from spark_kafka_backup.catalog.prune import partition_locked
from spark_kafka_backup.catalog.seals import rename_sealed
from spark_kafka_backup.catalog.store import read_catalog, write_catalog
from spark_kafka_backup.catalog.tail import tail_problem
from spark_kafka_backup.errors import ChecksumError, DamagedBackupError, DecryptionKeyError, FormatError, UsageError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.magic import MAGIC_V1
from spark_kafka_backup.format.naming import (
    INDEX_SUFFIX,
    RECORDS_SUFFIX,
    check_partition,
    check_segment_name,
    check_topic_name,
    partition_segments_prefix,
    rewritten_name,
)
from spark_kafka_backup.format.partition_index import PartitionIndexEntry, encode_partition_index
from spark_kafka_backup.format.segment_index import ENTRY_DTYPE
from spark_kafka_backup.fsutil import TMP_SUFFIX, fsync_dir
from spark_kafka_backup.partition.erased import ErasedOffsets
from spark_kafka_backup.partition.merge_intent import erase_intent_path
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.records_file import NO_KEYS, FramedHandle, open_records
from spark_kafka_backup.partition.segment_reader import SegmentIndexFile
from spark_kafka_backup.partition.spool import staged_segments
from spark_kafka_backup.storage import Location, exists, read_document, storage_for, write_whole
from spark_kafka_backup.storage.removals import Removals

#: Index entries handled per step, and plain bytes copied per read.
ENTRIES_PER_STEP = 1 << 16
CHUNK = 8 << 20
#: The largest intent read back (the erased offsets as ranges, about 30 bytes each).
MAX_INTENT_BYTES = 256 << 20


def intent_path(root: Location) -> Location:
    """Where an unfinished erase's intent is written down."""
    return erase_intent_path(root)


@dataclass(frozen=True)
class Replacement:
    """Segment ``old`` rewritten as ``new`` without the erased records; ``tail``: the newest segment of a backup on
    disk, plain, which the catalog describes by its committed prefix (else as a finished segment)."""

    old: str
    new: str
    tail: bool = False


@dataclass(frozen=True)
class PartitionErase:
    """What erasing from one partition does: its segments to replace, and exactly the stored offsets erased."""

    topic: str
    partition: int
    replacements: tuple[Replacement, ...]
    erased: ErasedOffsets
    records: int

    def encode(self) -> bytes:
        document = {
            "topic": self.topic,
            "partition": self.partition,
            "replaced": [[r.old, r.new, r.tail] for r in self.replacements],
            "records": self.records,
            "erased": [list(pair) for pair in self.erased.ranges()],
        }
        return json.dumps(document, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, document: object, *, file: str) -> PartitionErase:
        try:
            assert isinstance(document, dict)
            replacements = tuple(
                Replacement(check_segment_name(old, file=file), check_segment_name(new, file=file), bool(tail))
                for old, new, tail in document["replaced"]
            )
            return cls(
                check_topic_name(document["topic"], file=file),
                check_partition(document["partition"], file=file),
                replacements,
                ErasedOffsets.of((int(first), int(last)) for first, last in document["erased"]),
                int(document["records"]),
            )
        except FormatError:
            raise
        except (AssertionError, KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"not a valid erase intent ({type(exc).__name__}: {exc})", file=file) from exc


def pending_erase(root: Location) -> PartitionErase | None:
    """The unfinished erase of the backup under ``root``, if any."""
    path = intent_path(root)
    if not exists(path):
        return None
    return PartitionErase.decode(read_document(path, MAX_INTENT_BYTES, what="erase intent"), file=str(path))


def refuse_unfinished_erase(root: Location, topics: list[str]) -> None:
    """Refuse to read ``topics`` while an erase of one of them is unfinished: its records may be half erased."""
    plan = pending_erase(root)
    if plan is not None and plan.topic in topics:
        raise DamagedBackupError(
            f"an erase of {plan.topic}/{plan.partition} in {root} did not finish: finish it first with "
            f"spark-kafka-backup erase {root} --finish (a backup starting into it finishes it too)"
        )


def pending_erase_segments(root: Location) -> set[tuple[str, int, str]]:
    """The segments an unfinished erase is replacing, and the replacements it is writing."""
    plan = pending_erase(root)
    if plan is None:
        return set()
    return {(plan.topic, plan.partition, name) for r in plan.replacements for name in (r.old, r.new)}


def key_matches(reader: PartitionReader, key: bytes) -> ErasedOffsets:
    """The offsets of the partition's records whose key is exactly ``key`` (compared as bytes, on the columns)."""
    found: list[np.ndarray] = []
    wanted = np.frombuffer(key, dtype=np.uint8)
    for batch in reader.record_batches():
        columns = batch.columns
        candidates = np.flatnonzero(columns.key_lengths == len(key))
        if not len(candidates):
            continue
        data = np.frombuffer(batch.data, dtype=np.uint8)
        # The candidates' keys as rows of a matrix (a batch holds at most BATCH_RECORDS records).
        keys = data[columns.key_starts[candidates].astype(np.int64)[:, None] + np.arange(len(key))]
        hits = candidates[(keys == wanted).all(axis=1)]
        if len(hits):
            found.append(columns.offsets[hits].astype(np.int64))
    return ErasedOffsets.of_offsets(np.concatenate(found)) if found else ErasedOffsets()


def plan_partition(
    root: Location, topic: str, partition: int, chosen: ErasedOffsets, keys: KeyRing = NO_KEYS
) -> PartitionErase | None:
    """The segments of a partition holding records at ``chosen`` offsets, and exactly which stored offsets those are
    (``None``: no record to erase). Refused for a partition without a catalog or with a segment it does not
    describe (the replacements' checksums go in it)."""
    if not chosen:
        return None
    topic_dir = root / topic
    catalog = read_catalog(root, topic, partition)
    if catalog is None:
        raise UsageError(
            f"{topic}/{partition} has no catalog, in which an erase records the rewritten segments' checksums: run "
            f"spark-kafka-backup catalog rebuild {root} --topic {topic} first"
        )
    reader = PartitionReader(topic_dir, partition, keys=keys)
    cataloged = {entry.name for entry in catalog.segments}
    replacements: list[Replacement] = []
    erased: list[np.ndarray] = []
    for number, segment in enumerate(reader.segments):
        newest = number == len(reader.segments) - 1
        records_path, index_path = reader.segment_paths(segment)
        hits = _erased_in(index_path, chosen)
        if not len(hits):
            continue
        if segment.name not in cataloged and not (newest and isinstance(topic_dir, Path)):
            raise UsageError(
                f"{topic_dir / segment.name}: not in the partition's catalog, so its rewrite could not be checked: "
                f"run spark-kafka-backup catalog rebuild {root} --topic {topic} first"
            )
        # The newest segment on disk is appended to while plain; sealed (a writer sealed it, then was killed before
        # the catalog named it) it is finished.
        is_tail = newest and segment.name not in cataloged and stored_as(records_path) == (None, None)
        new = rewritten_name(partition, segment.name, segment.start_offset)
        replacements.append(Replacement(segment.name, new, is_tail))
        erased.append(hits)
    if not replacements:
        return None
    offsets = np.concatenate(erased)
    return PartitionErase(topic, partition, tuple(replacements), ErasedOffsets.of_offsets(offsets), len(offsets))


def stored_as(records_path: Location) -> tuple[str | None, str | None]:
    """How a records file is stored, by its own bytes: its codec and the id (hex) of the key that sealed it (``None``
    for a plain file)."""
    stored = open_records(records_path)
    try:
        return (stored.codec, stored.frames.key_id) if isinstance(stored, FramedHandle) else (None, None)
    finally:
        stored.close()


def _erased_in(index_path: Location, chosen: ErasedOffsets) -> np.ndarray:
    """The offsets among a segment's index entries that ``chosen`` covers."""
    found: list[np.ndarray] = []
    with SegmentIndexFile(index_path) as index:
        count = index.count
        for start in range(0, count, ENTRIES_PER_STEP):
            step = min(ENTRIES_PER_STEP, count - start)
            offsets = np.frombuffer(index.read_entries(start, step), dtype=ENTRY_DTYPE)["offset"].astype(np.int64)
            found.append(offsets[chosen.holds(offsets)])
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def erase_partition(
    root: Location, plan: PartitionErase, keys: KeyRing = NO_KEYS, removals: Removals | None = None
) -> None:
    """Carry out one partition's erase (the module docstring's steps); the caller holds the target's lease. ``keys``:
    those sealed segments are read and sealed again with; ``removals``: what a lock keeps of the replaced ones."""
    topic_dir = root / plan.topic
    catalog = read_catalog(root, plan.topic, plan.partition)
    assert catalog is not None
    sources = {entry.name: entry for entry in catalog.segments}
    sealing: dict[str, tuple[str | None, bytes | None]] = {}
    for replacement in plan.replacements:
        entry = sources.get(replacement.old)
        if entry is not None:
            check_source(topic_dir, entry, doing="erased")
            codec, key = entry.compression, entry.key_id
        else:
            tail = catalog.tail_of(replacement.old)
            problem = tail_problem(topic_dir, tail, keys) if tail is not None else None
            if problem is not None:
                raise ChecksumError(f"{topic_dir / replacement.old}: {problem}: damaged, nothing erased")
            codec, key = stored_as(topic_dir / (replacement.old + RECORDS_SUFFIX))
        sealing[replacement.old] = (codec, _key_of(topic_dir / (replacement.old + RECORDS_SUFFIX), key, keys))
    write_whole(intent_path(root), plan.encode())
    try:
        for replacement in plan.replacements:
            codec, kek = sealing[replacement.old]
            with staged_segments(topic_dir, (replacement.old,)) as files:  # one download on an object store
                copy = functools.partial(_copy_kept, files, replacement, plan.erased, keys)
                write_segment(topic_dir, replacement.new, copy, codec=codec, kek=kek)
        _switch(topic_dir, plan)
    except BaseException:
        finish_erase(root, keys, removals)  # backwards, unless the partition index names the replacements
        raise
    finish_erase(root, keys, removals)


def _key_of(records_path: Location, key_id: str | None, keys: KeyRing) -> bytes | None:
    """The key-encryption key a segment sealed under ``key_id`` is sealed again with (``None``: not sealed)."""
    if key_id is None:
        return None
    kek = keys.keys.get(bytes.fromhex(key_id))
    if kek is None:
        raise DecryptionKeyError(
            f"{records_path}: is encrypted with key id {key_id}; erasing from it needs that key "
            "(--encryption-key-file or --encryption-key-env)"
        )
    return kek


def _copy_kept(
    files: Location, replacement: Replacement, erased: ErasedOffsets, keys: KeyRing, records_tmp: Path, index_tmp: Path
) -> None:
    """The plain records of the segment (its files in ``files``) but the erased ones after one magic byte, and their
    index entries moved to match (runs of adjacent kept records are copied in one read each, up to :data:`CHUNK`)."""
    records_path = files / (replacement.old + RECORDS_SUFFIX)
    index_path = files / (replacement.old + INDEX_SUFFIX)
    stored = open_records(records_path, keys)
    position = 1
    try:
        with (
            SegmentIndexFile(index_path) as index,
            open(records_tmp, "wb") as records_out,
            open(index_tmp, "wb") as index_out,
        ):
            records_out.write(MAGIC_V1)
            index_out.write(MAGIC_V1)
            count = index.count
            for start in range(0, count, ENTRIES_PER_STEP):
                step = min(ENTRIES_PER_STEP, count - start)
                entries = np.frombuffer(index.read_entries(start, step), dtype=ENTRY_DTYPE)
                kept = entries[~erased.holds(entries["offset"].astype(np.int64))]
                if not len(kept):
                    continue
                starts = kept["position"].astype(np.int64)
                lengths = kept["length"].astype(np.int64)
                ends = starts + lengths
                cuts = np.flatnonzero(starts[1:] != ends[:-1]) + 1
                for first, stop in zip([0, *cuts.tolist()], [*cuts.tolist(), len(kept)], strict=True):
                    _copy_span(stored, int(starts[first]), int(ends[stop - 1]), records_out, records_path)
                moved = np.empty(len(kept), dtype=ENTRY_DTYPE)
                moved["offset"] = kept["offset"]
                moved["position"] = position + np.concatenate([[0], np.cumsum(lengths)[:-1]])
                moved["length"] = lengths
                index_out.write(moved.tobytes())
                position += int(lengths.sum())
            records_out.flush()
            index_out.flush()
            os.fsync(records_out.fileno())
            os.fsync(index_out.fileno())
    finally:
        stored.close()


def _copy_span(stored: object, at: int, end: int, out: object, records_path: Location) -> None:
    pread = stored.pread  # type: ignore[attr-defined]
    write = out.write  # type: ignore[attr-defined]
    while at < end:
        piece = pread(min(CHUNK, end - at), at)
        if not piece:
            raise FormatError("ends before the records its index names", file=str(records_path), position=at)
        write(piece)
        at += len(piece)


def _switch(topic_dir: Location, plan: PartitionErase) -> None:
    """Step 3: the partition index names each replacement in place of the segment it replaces."""
    replaced = {replacement.old: replacement.new for replacement in plan.replacements}
    with partition_locked(topic_dir, plan.topic, plan.partition) as held:
        segments = PartitionReader(topic_dir, plan.partition).segments
        missing = set(replaced) - {segment.name for segment in segments}
        if missing:
            raise FormatError(f"no longer names {sorted(missing)[0]} (changed since the plan?)", file=str(topic_dir))
        named = [PartitionIndexEntry(replaced.get(s.name, s.name), s.start_offset) for s in segments]
        held.replace_index(encode_partition_index(named))


def finish_erase(root: Location, keys: KeyRing = NO_KEYS, removals: Removals | None = None) -> str | None:
    """Complete a recorded erase (idempotent): ``"forwards"``, ``"backwards"`` or ``None`` when there was none.

    Backwards while the partition index names none of the replacements (the switch did not happen): their files go.
    Forwards when it names them all: the replaced segments' files go, then the erased offsets are recorded and the
    catalog and the seal record describe the replacements. Anything else is refused, the intent kept.
    """
    plan = pending_erase(root)
    if plan is None:
        return None
    topic_dir = root / plan.topic
    storage = storage_for(root)
    outcome = "forwards"
    if storage.list_files(topic_dir) is not None:  # else the topic was deleted since: nothing left to finish
        with partition_locked(topic_dir, plan.topic, plan.partition):
            current = pending_erase(root)
            if current is None or current.encode() != plan.encode():
                return None  # finished by another holder of the partition (a backup starting, a merge) meanwhile
            reader = PartitionReader(topic_dir, plan.partition, keys=keys)
            named = {segment.name for segment in reader.segments}
            switched = [replacement.new in named for replacement in plan.replacements]
            if not any(switched):
                outcome = "backwards"
                for replacement in plan.replacements:
                    _delete_segment(topic_dir, replacement.new)
                    if isinstance(topic_dir, Path):
                        for leftover in topic_dir.glob(f".{replacement.new}.*{TMP_SUFFIX}"):  # killed midway
                            leftover.unlink(missing_ok=True)
            elif all(switched):
                for replacement in plan.replacements:  # first: their records are the ones erased
                    if replacement.old not in named:
                        _delete_segment(topic_dir, replacement.old)
                add_erasure(root, plan.topic, plan.partition, plan.erased, plan.records)
                _describe_replacements(root, reader, plan)
                rename_sealed(root, topic_dir, plan.partition, keys,
                              {replacement.old: replacement.new for replacement in plan.replacements})  # fmt: skip
            else:
                raise FormatError(
                    f"the partition index names some of the segments an unfinished erase wrote ({intent_path(root)}), "
                    "not all: the partition was changed by something else (spark-kafka-backup verify says more)",
                    file=str(topic_dir),
                )
            if isinstance(topic_dir, Path):
                fsync_dir(topic_dir)
    path = intent_path(root)
    storage.delete(path)
    if isinstance(path, Path):
        fsync_dir(path.parent)
    if outcome == "forwards" and removals is not None and storage.list_files(topic_dir) is not None:
        purge_partition(topic_dir, plan.partition, removals)  # after the intent: a failure here blocks nothing
    return outcome


def purge_partition(topic_dir: Location, partition: int, removals: Removals) -> None:
    """Step 7, on a versioned or locked bucket: every earlier version of the partition's segment files (the replaced
    segments', and those of segments a prune or merge deleted, or of a name used again, which may hold the erased
    records) is deleted for good, or (locked) gathered in ``removals``. Only the current versions stay. Nothing to do
    on a disk or an unversioned bucket. The erase command runs it again for every partition with recorded
    erasures, so that a lock that has run out since, or a failure here, is made good by running it again."""
    removals.purge(topic_dir, partition_segments_prefix(partition))


def _delete_segment(topic_dir: Location, name: str) -> None:
    """Delete a segment's files: the records file first (a segment whose records file has its name is complete)."""
    storage = storage_for(topic_dir)
    for suffix in (RECORDS_SUFFIX, INDEX_SUFFIX):
        storage.delete(topic_dir / f"{name}{suffix}")


def _describe_replacements(root: Location, reader: PartitionReader, plan: PartitionErase) -> None:
    """Step 5's catalog: the replaced segments' entries (or committed prefix) give way to the replacements'."""
    catalog = read_catalog(root, plan.topic, plan.partition) or PartitionCatalog(plan.topic, plan.partition)
    old = {replacement.old for replacement in plan.replacements}
    place = {segment.name: number for number, segment in enumerate(reader.segments)}
    entries = [entry for entry in catalog.segments if entry.name not in old]
    have = {entry.name for entry in entries}
    tail = catalog.tail
    for replacement in plan.replacements:
        number = place.get(replacement.new)
        if number is None:
            continue  # pruned or merged away since
        if replacement.tail:
            if number == len(reader.segments) - 1:
                tail = describe_tail(reader)
        elif replacement.new not in have:
            entries.append(describe_segment(reader, number))
    if tail is not None and tail.name in old:
        tail = None
    updated = replace(catalog, segments=tuple(sorted(entries, key=lambda e: e.start_offset)), tail=tail)
    if updated != catalog:
        write_catalog(root, updated)
