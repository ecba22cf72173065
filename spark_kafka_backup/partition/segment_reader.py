"""Reading one segment: its index file by random access, its records in chunks.

Memory stays bounded by the chunk size (and the largest single record),
whatever the segment's size: the index is never loaded whole, entries are
fetched by ``pread`` for seeks and streamed for scans.

The segment index is the segment's commit record: a reader yields exactly
the records the index lists, checks each against its entry (offset, position,
length), and ignores bytes past the last entry (a writer's tail that is not
yet indexed, or a torn write that reopening will repair).

Reading follows the index, as the original tool's reader does, so the shapes
the original leaves after a crash and a restart read correctly (see
``formats/writing-and-repair.md``): bytes between two indexed records (a
partial record, or a whole record written but never indexed) are skipped with
a warning naming the file and byte range, and index entries shifted by a
partial entry in the middle of the index are found again (:meth:`SegmentIndexFile.shifts`).
"""

from __future__ import annotations

import logging
from array import array
from collections.abc import Iterator
from types import TracebackType
from typing import BinaryIO

from spark_kafka_backup.errors import FormatError, TruncatedError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.magic import check_magic
from spark_kafka_backup.format.naming import INDEX_SUFFIX, RECORDS_SUFFIX
from spark_kafka_backup.format.record import Record, decode_records
from spark_kafka_backup.format.segment_index import ENTRY, ENTRY_SIZE, SegmentIndexEntry
from spark_kafka_backup.partition.records_file import NO_KEYS, is_sealed, open_records, refuse_unindexed
from spark_kafka_backup.storage import Location, ReadHandle, storage_for

CHUNK_SIZE = 1 << 20

log = logging.getLogger("spark_kafka_backup.reader")


class SegmentIndexFile:
    """Random access to the entries of a segment index file.

    Entries are validated as they are read: a scan checks that offsets
    increase and that records do not overlap (bytes between two records are
    skipped, with a warning). A partial last entry (a writer appending right
    now, or a crash the next writer will repair) is not yet committed and is
    left out, like record bytes past the last entry.

    A partial entry *followed by more entries* (the original tool appended
    after one it had left) shifts every later entry off the 24-byte grid.
    When the file's size is off the grid, the entries are scanned once and,
    where an entry is implausible (offset not increasing, record overlapping
    the previous one or reaching past the records file), the scan looks for
    the entry again 1 to 23 bytes further on; :attr:`shifts` lists the
    skipped byte ranges, and entries are then read from the positions found.
    """

    def __init__(self, path: Location, *, legacy: bool = False) -> None:
        self.path = path
        self._handle: ReadHandle = storage_for(path).open_read(path)
        #: Byte ranges of partial entries skipped in the middle of the index.
        self.shifts: list[tuple[int, int]] = []
        self._positions: array[int] | None = None
        try:
            self.data_start = check_magic(self._handle.pread(1, 0), file=str(path), legacy=legacy)
            self._measure(self._handle.size)
            if self.torn_tail:
                self._realign()
        except BaseException:
            self._handle.close()
            raise

    def _measure(self, size: int) -> None:
        body = max(0, size - self.data_start)
        #: Bytes of a partial last entry, left out of ``count``.
        self.torn_tail = body % ENTRY_SIZE
        self.count = body // ENTRY_SIZE

    def _realign(self) -> None:
        """Find entries shifted by partial entries in the middle of the file (see the class docstring)."""
        size = self._handle.size
        records_size = _records_size_beside(self.path)
        block = _Blocks(self._handle)
        positions: array[int] = array("q")
        shifts: list[tuple[int, int]] = []
        position = self.data_start
        previous_offset, previous_end = -1, self.data_start

        def plausible(at: int) -> tuple[int, int, int] | None:
            if at + ENTRY_SIZE > size:
                return None
            entry = ENTRY.unpack(block.read(at, ENTRY_SIZE))
            offset, record_position, length = entry
            if offset <= previous_offset or length <= 0 or record_position < previous_end:
                return None
            if records_size is not None and record_position + length > records_size:
                return None
            return entry

        while position + ENTRY_SIZE <= size:
            entry = plausible(position)
            if entry is None:
                for skip in range(1, ENTRY_SIZE):
                    entry = plausible(position + skip)
                    if entry is not None:
                        shifts.append((position, position + skip))
                        position += skip
                        break
                if entry is None:
                    break  # a torn tail, or damage a reader reports at this entry
            positions.append(position)
            previous_offset, previous_end = entry[0], entry[1] + entry[2]
            position += ENTRY_SIZE
        if shifts:
            self.shifts = shifts
            self._positions = positions
            self.count = len(positions)
            self.torn_tail = size - position
            for start, end in shifts:
                warn_once(
                    f"{self.path}: bytes {start}..{end - 1} are a partial index entry; the entries after it are read"
                )

    def refresh(self) -> None:
        """Count the entries again: a writer may have appended since this file was opened."""
        size = self._handle.refresh_size()
        if self._positions is None:
            self._measure(size)

    def __enter__(self) -> SegmentIndexFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._handle.close()

    def entry_position(self, index: int) -> int:
        """Where entry ``index`` starts in the file."""
        if self._positions is not None:
            return self._positions[index]
        return self.data_start + index * ENTRY_SIZE

    def entry(self, index: int) -> SegmentIndexEntry:
        """The entry at ``index`` (0-based)."""
        raw = self._handle.pread(ENTRY_SIZE, self.entry_position(index))
        return SegmentIndexEntry(*ENTRY.unpack(raw))

    def read_entries(self, start: int, count: int) -> bytes:
        """The raw bytes of ``count`` entries from entry ``start`` (24 bytes each), unchecked."""
        if self._positions is None:
            return self._handle.pread(count * ENTRY_SIZE, self.data_start + start * ENTRY_SIZE)
        return b"".join(self._handle.pread(ENTRY_SIZE, self._positions[i]) for i in range(start, start + count))

    def bisect(self, offset: int) -> int:
        """Index of the first entry whose offset is >= ``offset`` (``count`` if none)."""
        low, high = 0, self.count
        while low < high:
            middle = (low + high) // 2
            if self.entry(middle).offset < offset:
                low = middle + 1
            else:
                high = middle
        return low

    def iter_entries(self, start: int = 0) -> Iterator[tuple[int, int, int]]:
        """Stream ``(offset, position, length)`` from entry ``start`` on.

        Checks as it goes that offsets increase and each record starts at or
        after the end of the previous one (the first at or after the records
        file's data start); a record starting later leaves unindexed bytes
        between the two, which readers skip.
        """
        if start > 0:
            before = self.entry(start - 1)
            previous_offset, expected_position = before.offset, before.end
        else:
            previous_offset, expected_position = -1, self.data_start
        index = start
        step = CHUNK_SIZE // ENTRY_SIZE
        while index < self.count:
            n = min(step, self.count - index)
            raw = self.read_entries(index, n)
            for entry in ENTRY.iter_unpack(raw):
                offset, position, length = entry
                if offset <= previous_offset or position < expected_position or length <= 0:
                    self.entry_error(index, entry, previous_offset, expected_position)
                yield entry
                previous_offset = offset
                expected_position = position + length
                index += 1

    def entry_error(
        self, index: int, entry: tuple[int, int, int], previous_offset: int, expected_position: int
    ) -> None:
        offset, position, length = entry
        at = self.entry_position(index)
        if offset <= previous_offset:
            raise FormatError(
                f"index entry {index}: offsets must increase",
                file=str(self.path),
                position=at,
                expected=f"an offset > {previous_offset}",
                found=str(offset),
            )
        raise FormatError(
            f"index entry {index} (offset {offset}): record overlaps the previous one",
            file=str(self.path),
            position=at + 8,
            expected=f"a position >= {expected_position} and a length > 0",
            found=f"position {position}, length {length}",
        )


def stream_records(
    handle: BinaryIO, start: int, end: int, *, file: str, chunk_size: int = CHUNK_SIZE
) -> Iterator[tuple[Record, int, int]]:
    """Yield ``(record, position, length)`` for the records in bytes ``[start, end)``.

    Reads ``chunk_size`` at a time; a record larger than a chunk is read
    whole, but never more than ``end - start`` bytes in all.
    """
    handle.seek(start)
    buf = b""
    base = start
    read_to = start
    size = chunk_size
    while True:
        want = min(size, end - read_to)
        if want > 0:
            chunk = handle.read(want)
            if len(chunk) < want:
                raise TruncatedError(
                    "records file is shorter than its index says",
                    file=file,
                    position=read_to + len(chunk),
                    expected=f"{end} bytes",
                    found=f"{read_to + len(chunk)}",
                )
            buf = buf + chunk if buf else chunk
            read_to += want
        more = end - read_to
        consumed = 0
        for record, position, length in decode_records(buf, 0, len(buf), file=file, base=base, more=more):
            yield record, base + position, length
            consumed = position + length
        if consumed:
            buf = buf[consumed:]
            base += consumed
            size = chunk_size
        else:
            size *= 2
        if more == 0 and not buf:
            return


def iter_segment(
    records_path: Location,
    index_path: Location,
    *,
    from_offset: int | None = None,
    legacy: bool = False,
    keys: KeyRing = NO_KEYS,
) -> Iterator[Record]:
    """Yield the records a segment's index lists, from ``from_offset`` on (``keys``: a sealed segment's)."""
    for record, _, _ in iter_segment_entries(
        records_path, index_path, from_offset=from_offset, legacy=legacy, keys=keys
    ):
        yield record


def iter_segment_entries(
    records_path: Location,
    index_path: Location,
    *,
    from_offset: int | None = None,
    legacy: bool = False,
    keys: KeyRing = NO_KEYS,
) -> Iterator[tuple[Record, int, int]]:
    """Yield ``(record, position, length)`` for each record the index lists, checked against its entry."""
    with SegmentIndexFile(index_path, legacy=legacy) as index:
        records = open_records(records_path, keys)
        try:
            yield from _iter_indexed(index, records, records_path, from_offset=from_offset, legacy=legacy)
        finally:
            records.close()


def check_segment_pair(index: SegmentIndexFile, records: ReadHandle, records_path: Location, *, legacy: bool) -> None:
    """Refuse a records file whose magic byte disagrees with its index's, or that ends before the last entry."""
    data_start = check_magic(records.pread(1, 0), file=str(records_path), legacy=legacy)
    if data_start != index.data_start:
        raise FormatError(
            "records file and its index disagree about the magic byte",
            file=str(index.path),
            position=0,
            expected="both with or both without the v1 magic byte",
        )
    if index.count == 0:
        return
    last = index.entry(index.count - 1)
    if last.end > records.size:
        raise FormatError(
            f"last index entry (offset {last.offset}) points outside its records file {records_path}",
            file=str(index.path),
            position=index.entry_position(index.count - 1) + 8,
            expected=f"position + length <= {records.size}",
            found=f"{last.position} + {last.length} = {last.end}",
        )


def _iter_indexed(
    index: SegmentIndexFile, records: ReadHandle, records_path: Location, *, from_offset: int | None, legacy: bool
) -> Iterator[tuple[Record, int, int]]:
    index_path = index.path
    handle = records.stream
    check_segment_pair(index, records, records_path, legacy=legacy)
    if index.count == 0:
        return
    first = 0 if from_offset is None else index.bisect(from_offset)
    if first == index.count:
        return
    sealed = is_sealed(records)
    if sealed and first == 0 and index.entry(0).position != index.data_start:
        refuse_unindexed(str(records_path), index.data_start, index.entry(0).position)
    for start, end, run in _contiguous_runs(index.iter_entries(first), records_path, sealed=sealed):
        for (record, position, length), entry in zip(
            stream_records(handle, start, end, file=str(records_path)), run, strict=False
        ):
            if (record.offset, position, length) != entry:
                offset, expected_position, expected_length = entry
                raise FormatError(
                    "record does not match its index entry",
                    file=str(records_path),
                    position=position,
                    expected=(
                        f"offset {offset} at {expected_position}, {expected_length} bytes (from {index_path.name})"
                    ),
                    found=f"offset {record.offset} at {position}, {length} bytes",
                )
            yield record, position, length


#: Entries per run: bounds what a run holds in memory.
_RUN = 1 << 16


def _contiguous_runs(
    entries: Iterator[tuple[int, int, int]], records_path: Location, *, sealed: bool = False
) -> Iterator[tuple[int, int, list[tuple[int, int, int]]]]:
    """Group index entries into runs of records that follow each other: ``(start, end, entries)``.

    Bytes between two runs are not indexed (a partial record or an unindexed
    copy left by a crash of the original tool): skipped, with a warning; in a
    ``sealed`` segment (written whole, never by a crash) they are refused.
    """
    run: list[tuple[int, int, int]] = []
    start = end = 0
    for entry in entries:
        position = entry[1]
        if run and (position != end or len(run) >= _RUN):
            yield start, end, run
            if position != end and sealed:
                refuse_unindexed(str(records_path), end, position)
            if position != end:
                warn_once(f"{records_path}: bytes {end}..{position - 1} are not indexed (left by a crash); skipped")
            run = []
        if not run:
            start = position
        run.append(entry)
        end = position + entry[2]
    if run:
        yield start, end, run


class _Blocks:
    """Reads of a file through one cached 1 MiB block (a scan of small reads, few system calls)."""

    def __init__(self, handle: ReadHandle) -> None:
        self._handle = handle
        self._start = 0
        self._data = b""

    def read(self, position: int, length: int) -> bytes:
        if not (self._start <= position and position + length <= self._start + len(self._data)):
            self._start = position
            self._data = self._handle.pread(max(CHUNK_SIZE, length), position)
        at = position - self._start
        return self._data[at : at + length]


def _records_size_beside(index_path: Location) -> int | None:
    """The size of the records file beside a segment index (``None`` when there is none)."""
    name = getattr(index_path, "name", "")
    if not name.endswith(INDEX_SUFFIX):
        return None
    records = index_path.parent / (name[: -len(INDEX_SUFFIX)] + RECORDS_SUFFIX)
    if storage_for(records).size(records) is None:
        return None
    handle = open_records(records)  # the plain size: index positions are plain positions
    try:
        return handle.size
    finally:
        handle.close()


_warned: set[str] = set()


def warn_once(message: str) -> None:
    """Log a warning about a file's shape once per process (every reader of the file would repeat it)."""
    if message not in _warned:
        _warned.add(message)
        log.warning("%s", message)
