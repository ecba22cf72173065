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
        fastavro.writer(buffer, SCHEMA, records)
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
                fastavro.writer(handle, SCHEMA, records)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:  # a torn tail stays: the next append cuts it first
            raise disk_error(exc, path) from exc
    else:
        _rewrite(path, records)
    return len(records)


def _rewrite(path: Path, records: list[dict[str, Any]]) -> None:
    buffer = io.BytesIO()
    fastavro.writer(buffer, SCHEMA, records)
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
    except (ValueError, EOFError, StopIteration, OSError):
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

    The first call reads the files of the day of ``since_ms`` and later. Then, on disk, where a day's file grows by
    appends, the last file read is read on from the end of the last whole block read (a file rewritten since, after a
    torn append, is recognised by its header, which carries a new sync marker, and read again for its rounds newer
    than the newest already given); on an object store, where each round is an object of its own, only new objects.
    What is kept between calls is a file name, a byte offset and a header: nothing that grows with the history."""

    def __init__(self, root: Location, since_ms: int) -> None:
        self.root = root
        self._since = "offsets-" + dt.datetime.fromtimestamp(since_ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d")
        self._last: str | None = None
        self._read_to = 0
        self._header = b""
        self._newest = -1

    def new_entries(self) -> list[HistoryEntry]:
        directory = history_dir(self.root)
        names = sorted(name for name in storage_for(directory).list_files(directory) or [] if _FILE.match(name))
        entries: list[HistoryEntry] = []
        for name in names:
            if name < (self._last or self._since):
                continue
            path = directory / name
            if isinstance(path, ObjectPath):
                if name == self._last:
                    continue  # an object is written whole, once
                records = _read_file(path)[0]
                self._last = name
            else:
                records = self._read_on(path, continuing=name == self._last)
                self._last = name
            entries.extend(_entry(record) for record in records)
        if entries:
            self._newest = max(self._newest, max(entry.round_time for entry in entries))
        return entries

    def _read_on(self, path: Path, *, continuing: bool) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        try:
            handle = open(path, "rb")  # noqa: SIM115 - closed below, read block by block
        except FileNotFoundError:
            return records
        with handle:
            try:
                reader = fastavro.block_reader(handle)
            except (ValueError, EOFError, StopIteration, OSError):
                return records  # a header not written whole yet
            header_end = handle.tell()
            handle.seek(0)
            header = handle.read(header_end)
            rewritten = continuing and header != self._header
            self._header = header
            self._read_to = max(self._read_to, header_end) if continuing and not rewritten else header_end
            handle.seek(self._read_to)
            try:
                for block in reader:
                    records.extend(block)  # type: ignore[arg-type]
                    self._read_to = handle.tell()
            except (ValueError, EOFError, StopIteration, OSError):
                pass  # a torn or half-written last block: read again from its start next time
        if rewritten:
            records = [record for record in records if record["roundTimeMs"] > self._newest]
        return records
