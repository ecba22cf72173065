"""The history of consumer group offsets: every stored offset round, kept.

The ``consumer_offsets_partition_PPP`` files hold only the latest offsets (the
original's format). Beside them, each round the backup stores is appended to
an Avro object container file per UTC day::

    ROOT/kbackup~state/offsets-history/offsets-YYYY-MM-DD.avro

(on an object store, which cannot append, one object per round:
``offsets-YYYY-MM-DD-<round epoch ms, 15 digits>.avro``), with one record per
group and partition (schema :data:`SCHEMA`). A round is
appended only once the backup holds the data it points to (see
:mod:`spark_kafka_backup.backup.group_offsets`), so history never runs ahead of the data.

Crash safety: an append that dies half-way leaves a torn last block; readers
stop at it, and the next append first rewrites the file (atomically) with the
blocks before it.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro

from spark_kafka_backup.fsutil import atomic_write, disk_error, fsync_dir
from spark_kafka_backup.partition.layout import state_dir
from spark_kafka_backup.storage import Location, ObjectPath, storage_for, write_whole

_FILE = re.compile(r"^offsets-[0-9T:_.-]+\.avro$")

#: What fastavro raises for a file that ends inside a block (a torn append, one being written).
_TORN = (ValueError, EOFError, StopIteration, OSError, IndexError)

#: Records buffered before fastavro ends a block: more than any round, so that a round is one block, which a reader
#: sees whole or not at all (a round in several blocks, read between two of them, would look complete).
_ROUND_BLOCK = 1 << 30


def history_dir(root: Location) -> Location:
    """``STATE/offsets-history`` (see :func:`spark_kafka_backup.partition.layout.state_dir`)."""
    return state_dir(root) / "offsets-history"


SCHEMA = fastavro.parse_schema(
    {
        "type": "record",
        "name": "GroupOffset",
        "namespace": "kbackup",
        "doc": "A consumer group's committed offset on one partition, as stored by one offset round.",
        "fields": [
            {"name": "roundTimeMs", "type": "long", "doc": "when the round read the group offsets (epoch ms)"},
            {"name": "group", "type": "string"},
            {"name": "topic", "type": "string"},
            {"name": "partition", "type": "int"},
            {"name": "offset", "type": "long"},
            {
                "name": "topicId",
                "type": ["null", "string"],
                "default": None,
                "doc": "the topic id (incarnation) the round read the offset for; null: not recorded",
            },
        ],
    }
)


@dataclass(frozen=True)
class HistoryEntry:
    round_time: int
    group: str
    topic: str
    partition: int
    offset: int
    #: The topic id (incarnation) the offset was read for; ``None``: not recorded (an older spark-kafka-backup).
    topic_id: str | None = None


def history_file(root: Location, round_time: int) -> Location:
    """The file a round goes into: one per day on disk, one per round on an object store."""
    day = dt.datetime.fromtimestamp(round_time / 1000, tz=dt.UTC).strftime("%Y-%m-%d")
    if isinstance(root, ObjectPath):
        return history_dir(root) / f"offsets-{day}-{round_time:015d}.avro"
    return history_dir(root) / f"offsets-{day}.avro"


def append_round(
    root: Location,
    round_time: int,
    groups: Mapping[str, Mapping[tuple[str, int], int]],
    topic_ids: Mapping[str, str] | None = None,
) -> int:
    """Append one round, each offset with the id of the topic incarnation it was read for (``topic_ids``); return
    how many entries were written.

    On disk the day's file is appended to (a torn tail from a crash is cut first, and a file an older version wrote
    without topic ids is rewritten with the field first, its entries without an id); objects cannot be appended to,
    so there each round is a new object written whole.
    """
    ids = topic_ids or {}
    records = [
        {"roundTimeMs": round_time, "group": group, "topic": topic, "partition": partition, "offset": offset,
         "topicId": ids.get(topic)}
        for group, offsets in sorted(groups.items())
        for (topic, partition), offset in sorted(offsets.items())
    ]  # fmt: skip
    if not records:
        return 0
    path = history_file(root, round_time)
    if isinstance(path, ObjectPath):
        buffer = io.BytesIO()
        fastavro.writer(buffer, SCHEMA, records, sync_interval=_ROUND_BLOCK)
        write_whole(path, buffer.getvalue())
        return len(records)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        valid, torn = _read_file(path)
        # Appending takes the file's own schema: one without topicId would drop the ids silently.
        if torn or any("topicId" not in record for record in valid):
            _rewrite(path, [{**record, "topicId": record.get("topicId")} for record in valid])
        try:
            with open(path, "a+b") as handle:
                fastavro.writer(handle, SCHEMA, records, sync_interval=_ROUND_BLOCK)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:  # a torn tail stays: the next append cuts it first
            raise disk_error(exc, path) from exc
    else:
        _rewrite(path, records)
    return len(records)


def _rewrite(path: Path, records: list[dict[str, Any]]) -> None:
    buffer = io.BytesIO()
    fastavro.writer(buffer, SCHEMA, records, sync_interval=_ROUND_BLOCK)
    atomic_write(path, buffer.getvalue())
    fsync_dir(path.parent)


def _read_file(path: Location) -> tuple[list[dict[str, Any]], bool]:
    """The records of one history file up to any torn tail, and whether there was one."""
    records: list[dict[str, Any]] = []
    handle = storage_for(path).open_read(path)
    try:
        # Block by block: a block is yielded only once its closing sync
        # marker has been read, so a torn last block is never half-used.
        for block in fastavro.block_reader(handle.stream):
            records.extend(block)  # type: ignore[arg-type]
    except _TORN:
        return records, True
    finally:
        handle.close()
    return records, False


def has_history(root: Location) -> bool:
    return bool(_history_files(root))


def _history_files(root: Location) -> list[Location]:
    directory = history_dir(root)
    names = storage_for(directory).list_files(directory) or []
    return [directory / name for name in sorted(names) if _FILE.match(name)]


def read_history(root: Location) -> Iterator[HistoryEntry]:
    """Every entry of every history file, by file name (day, then round)."""
    for path in _history_files(root):
        for record in _read_file(path)[0]:
            yield HistoryEntry(
                record["roundTimeMs"], record["group"], record["topic"], record["partition"], record["offset"],
                record.get("topicId"),
            )  # fmt: skip


def offsets_as_of(
    root: Location, time_ms: int, *, topic_ids: Mapping[str, str] | None = None
) -> tuple[int, dict[str, dict[tuple[str, int], int]]] | None:
    """The latest round at or before ``time_ms``: its time and every group's offsets then; ``None`` if none.

    ``topic_ids``: the incarnation the backup holds of each topic; an entry read for another incarnation of its topic
    is left out (an entry without an id is taken: written before ids were recorded)."""
    chosen: int | None = None
    groups: dict[str, dict[tuple[str, int], int]] = {}
    ids = topic_ids or {}
    for entry in read_history(root):
        if entry.round_time > time_ms:
            continue
        if entry.topic_id is not None and ids.get(entry.topic, entry.topic_id) != entry.topic_id:
            continue
        if chosen is None or entry.round_time > chosen:
            chosen, groups = entry.round_time, {}
        if entry.round_time == chosen:
            groups.setdefault(entry.group, {})[(entry.topic, entry.partition)] = entry.offset
    return None if chosen is None else (chosen, groups)


def _entry(record: Mapping[str, Any]) -> HistoryEntry:
    return HistoryEntry(
        record["roundTimeMs"], record["group"], record["topic"], record["partition"], record["offset"],
        record.get("topicId"),
    )  # fmt: skip


class HistoryTail:
    """The rounds appended to a backup's offset history since the last call, for a reader that looks again and again
    (a standby's follower, every pass) without reading the whole history each time.

    The first call reads the rounds of the day of ``since_ms`` and later (on an object store at most the newest
    ``first_objects`` of them). Then, on disk, where a day's file grows by appends, the last file read is read on from
    the end of the last whole block read (a file rewritten since, after a torn append, is recognised by its header,
    which carries a new sync marker, and read again for its rounds newer than the newest already given); on an object
    store, where each round is an object of its own, only new objects, listed by their day's name prefix (not the
    whole history, which grows without end). Kept between calls: a file name, a byte offset and a header.

    Entries are given as they are read: a failure part-way loses none (the next call reads on from the last block or
    object whose entries were all given), but may give some again, which a reader takes without harm."""

    def __init__(self, root: Location, since_ms: int, *, first_objects: int = 1440) -> None:
        self.root = root
        self._since = _day(since_ms)
        self._first_objects = first_objects
        self._last: str | None = None
        self._read_to = 0
        self._header = b""
        self._newest = -1

    def entries(self) -> Iterator[HistoryEntry]:
        directory = history_dir(self.root)
        for name in self._names(directory):
            path = directory / name
            if isinstance(path, ObjectPath):
                for record in _read_file(path)[0]:  # an object is written whole, once
                    yield self._given(record)
                self._last = name
            else:
                yield from self._read_on(path, name)

    def _given(self, record: Mapping[str, Any]) -> HistoryEntry:
        entry = _entry(record)
        self._newest = max(self._newest, entry.round_time)
        return entry

    def _names(self, directory: Location) -> list[str]:
        """The files to read, in order: on disk the last one read again (it may have grown) and any after it; on an
        object store the objects after the last one read, listed day by day from its day to tomorrow (a backup's
        clock a little ahead)."""
        storage = storage_for(directory)
        if not isinstance(directory, ObjectPath):
            found = sorted(name for name in storage.list_files(directory) or [] if _FILE.match(name))
            return [name for name in found if name >= (self._last or f"offsets-{self._since}")]
        first = self._since if self._last is None else self._last[len("offsets-") : len("offsets-") + 10]
        day = dt.date.fromisoformat(first)
        tomorrow = dt.datetime.now(tz=dt.UTC).date() + dt.timedelta(days=1)
        names: list[str] = []
        while day <= tomorrow:
            listed = storage.list_files(directory, starting_with=f"offsets-{day.isoformat()}") or []
            names += sorted(name for name in listed if _FILE.match(name))
            day += dt.timedelta(days=1)
        if self._last is None:
            return names[-self._first_objects :]
        return [name for name in names if name > self._last]

    def _read_on(self, path: Path, name: str) -> Iterator[HistoryEntry]:
        """A day's file on disk, from where the last call stopped in it (from its start when it is new or rewritten)."""
        continuing = name == self._last
        try:
            handle = open(path, "rb")  # noqa: SIM115 - closed below, read block by block
        except FileNotFoundError:
            return
        with handle:
            try:
                reader = fastavro.block_reader(handle)
            except _TORN:
                return  # a header not written whole yet
            header_end = handle.tell()
            handle.seek(0)
            header = handle.read(header_end)
            rewritten = continuing and header != self._header
            newest_before = self._newest
            start = max(self._read_to, header_end) if continuing and not rewritten else header_end
            self._last, self._header, self._read_to = name, header, start
            handle.seek(start)
            try:
                for block in reader:
                    end = handle.tell()
                    for record in block:
                        entry = _entry(record)  # type: ignore[arg-type]
                        if rewritten and entry.round_time <= newest_before:
                            continue  # given before the file was rewritten
                        self._newest = max(self._newest, entry.round_time)
                        yield entry
                    self._read_to = end
            except _TORN:
                return  # a torn or half-written last block: read again from its start next time


def _day(epoch_ms: int) -> str:
    return dt.datetime.fromtimestamp(epoch_ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d")
