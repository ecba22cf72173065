"""Reading one segment: its index file by random access, its records in chunks.

Memory stays bounded by the chunk size (and the largest single record),
whatever the segment's size: the index is never loaded whole, entries are
fetched by ``pread`` for seeks and streamed for scans.

The segment index is the segment's commit record: a reader yields exactly
the records the index lists, checks each against its entry (offset, position,
length), and ignores bytes past the last entry (a writer's tail that is not
yet indexed, or a torn write that reopening will repair).
"""

from __future__ import annotations

from collections.abc import Iterator
from types import TracebackType
from typing import BinaryIO

from kbackup.errors import FormatError, TruncatedError
from kbackup.format.magic import check_magic
from kbackup.format.record import Record, decode_records
from kbackup.format.segment_index import ENTRY, ENTRY_SIZE, SegmentIndexEntry
from kbackup.storage import Location, ReadHandle, storage_for

CHUNK_SIZE = 1 << 20


class SegmentIndexFile:
    """Random access to the entries of a segment index file.

    Entries are validated as they are read: a scan checks that offsets
    increase and that records are contiguous. A partial last entry (a writer
    appending right now, or a crash the next writer will repair) is not yet
    committed and is left out, like record bytes past the last entry.
    """

    def __init__(self, path: Location, *, legacy: bool = False) -> None:
        self.path = path
        self._handle: ReadHandle = storage_for(path).open_read(path)
        try:
            self.data_start = check_magic(self._handle.pread(1, 0), file=str(path), legacy=legacy)
        except BaseException:
            self._handle.close()
            raise
        self._measure(self._handle.size)

    def _measure(self, size: int) -> None:
        body = max(0, size - self.data_start)
        #: Bytes of a partial last entry, left out of ``count``.
        self.torn_tail = body % ENTRY_SIZE
        self.count = body // ENTRY_SIZE

    def refresh(self) -> None:
        """Count the entries again: a writer may have appended since this file was opened."""
        self._measure(self._handle.refresh_size())

    def __enter__(self) -> SegmentIndexFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._handle.close()

    def entry(self, index: int) -> SegmentIndexEntry:
        """The entry at ``index`` (0-based)."""
        raw = self._handle.pread(ENTRY_SIZE, self.data_start + index * ENTRY_SIZE)
        return SegmentIndexEntry(*ENTRY.unpack(raw))

    def read_entries(self, start: int, count: int) -> bytes:
        """The raw bytes of ``count`` entries from entry ``start`` (24 bytes each), unchecked."""
        return self._handle.pread(count * ENTRY_SIZE, self.data_start + start * ENTRY_SIZE)

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

        Checks as it goes that offsets increase and each record starts where
        the previous one ended (the first at the records file's data start).
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
                if offset <= previous_offset or position != expected_position or length <= 0:
                    self._entry_error(index, entry, previous_offset, expected_position)
                yield entry
                previous_offset = offset
                expected_position = position + length
                index += 1

    def _entry_error(
        self, index: int, entry: tuple[int, int, int], previous_offset: int, expected_position: int
    ) -> None:
        offset, position, length = entry
        at = self.data_start + index * ENTRY_SIZE
        if offset <= previous_offset:
            raise FormatError(
                f"index entry {index}: offsets must increase",
                file=str(self.path),
                position=at,
                expected=f"an offset > {previous_offset}",
                found=str(offset),
            )
        raise FormatError(
            f"index entry {index} (offset {offset}): record does not follow the previous one",
            file=str(self.path),
            position=at + 8,
            expected=f"position {expected_position} and a length > 0",
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
) -> Iterator[Record]:
    """Yield the records a segment's index lists, from ``from_offset`` on."""
    with SegmentIndexFile(index_path, legacy=legacy) as index:
        records = storage_for(records_path).open_read(records_path)
        try:
            yield from _iter_indexed(index, records, records_path, from_offset=from_offset, legacy=legacy)
        finally:
            records.close()


def _iter_indexed(
    index: SegmentIndexFile, records: ReadHandle, records_path: Location, *, from_offset: int | None, legacy: bool
) -> Iterator[Record]:
    index_path = index.path
    handle = records.stream
    records_size = records.size
    data_start = check_magic(records.pread(1, 0), file=str(records_path), legacy=legacy)
    if data_start != index.data_start:
        raise FormatError(
            "records file and its index disagree about the magic byte",
            file=str(index_path),
            position=0,
            expected="both with or both without the v1 magic byte",
        )
    if index.count == 0:
        return
    last = index.entry(index.count - 1)
    if last.end > records_size:
        raise FormatError(
            f"last index entry (offset {last.offset}) points outside its records file {records_path}",
            file=str(index_path),
            position=index.data_start + (index.count - 1) * ENTRY_SIZE + 8,
            expected=f"position + length <= {records_size}",
            found=f"{last.position} + {last.length} = {last.end}",
        )
    first = 0 if from_offset is None else index.bisect(from_offset)
    if first == index.count:
        return
    entries = index.iter_entries(first)
    start = index.entry(first).position
    for (record, position, length), entry in zip(
        stream_records(handle, start, last.end, file=str(records_path)), entries, strict=False
    ):
        if (record.offset, position, length) != entry:
            offset, expected_position, expected_length = entry
            raise FormatError(
                "record does not match its index entry",
                file=str(records_path),
                position=position,
                expected=f"offset {offset} at {expected_position}, {expected_length} bytes (from {index_path.name})",
                found=f"offset {record.offset} at {position}, {length} bytes",
            )
        yield record
