"""Offsets the source cluster deleted before the backup read them: known gaps, lost at the source.

Retention (or ``kafka-delete-records``) can move a partition's log start past
offsets the backup has not read yet: while it is stopped, or while a task is
reading the partition. Those records are gone; what the backup can do is say
so. Each such range is recorded here, so that ``ls``, ``describe``, the
report and ``verify`` show it as lost at the source, which is not damage to
the backup, and the job counts it.

One small JSON document per range, so that tasks reading partitions of one
topic at once never write the same file::

    STATE/catalog/<topic>/source-gaps/partition_PPP_from_FIRST.json
    {"version": 1, "topic": "orders", "partition": 3, "first": 1200, "last": 1899,
     "seenAt": 1795334400000, "how": "read"}

``first``..``last`` (inclusive) are offsets that no longer existed on the
source when the backup came to read them. ``how`` says how that is known:
``read`` (the spark-kafka-backup source asked for ``first`` and the broker said it is
below the log start, which was ``last + 1`` or more) or ``inferred`` (behind
Spark's Kafka source, which skips deleted offsets by itself: the sink found
records missing below the partition's log start; offsets that were
transaction markers deleted since may be among them).

A range is recorded **before** any record after it is written, so a crash
never leaves a gap that the rerun (which finds those records stored) could
not see again. Recording the same range twice keeps the wider one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass

from spark_kafka_backup.catalog.store import catalog_dir
from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.format.json_document import parse_document
from spark_kafka_backup.format.naming import check_partition, check_topic_name
from spark_kafka_backup.storage import Location, exists, read_limited, storage_for, write_whole

GAPS_VERSION = 1
#: How a gap is known (module docstring).
READ = "read"
INFERRED = "inferred"
#: Read by a task while the topic was deleted: dropped, since which incarnation it came from cannot be told.
DROPPED = "dropped"
#: Not a loss at the source: records the backup held and ``spark-kafka-backup erase`` took out on purpose (kept in
#: :mod:`spark_kafka_backup.catalog.erasures`, never in this directory; gaps of this kind only explain offsets).
ERASED = "erased"
#: What each kind adds to a line naming the range.
HOW = {
    READ: "",
    INFERRED: " (inferred: below the partition's log start when the records after it were written)",
    DROPPED: " (read while the topic was deleted: dropped, as which incarnation they came from cannot be told)",
}
_MAX_DOCUMENT = 1 << 16


@dataclass(frozen=True)
class SourceGap:
    """Offsets ``first``..``last`` of a partition, deleted at the source before the backup read them."""

    topic: str
    partition: int
    first: int
    last: int
    seen_at: int = 0  # epoch ms
    how: str = READ

    @property
    def count(self) -> int:
        return self.last - self.first + 1

    def describe(self) -> str:
        span = str(self.first) if self.first == self.last else f"{self.first}..{self.last}"
        return f"{self.topic}/{self.partition} offsets {span}"

    def encode(self) -> bytes:
        document = {
            "version": GAPS_VERSION,
            "topic": self.topic,
            "partition": self.partition,
            "first": self.first,
            "last": self.last,
            "seenAt": self.seen_at,
            "how": self.how,
        }
        return json.dumps(document, indent=1).encode() + b"\n"

    @classmethod
    def decode(cls, data: bytes, *, file: str) -> SourceGap:
        try:
            document = parse_document(data, file=file, what="source gap record")
            if not isinstance(document, dict) or document.get("version") != GAPS_VERSION:
                found = document.get("version") if isinstance(document, dict) else type(document).__name__
                raise FormatError("unsupported source gap record version", file=file, found=repr(found))
            gap = cls(
                check_topic_name(document["topic"], file=file),
                check_partition(document["partition"], file=file),
                int(document["first"]),
                int(document["last"]),
                int(document.get("seenAt", 0)),
                str(document.get("how", READ)),
            )
        except FormatError:
            raise
        except (ValueError, KeyError, TypeError, RecursionError, OverflowError) as exc:
            raise FormatError(f"not a valid source gap record ({type(exc).__name__})", file=file) from exc
        if gap.first < 0 or gap.last < gap.first or gap.partition < 0:
            raise FormatError("a source gap needs 0 <= first <= last", file=file, found=f"{gap.first}..{gap.last}")
        return gap


def gaps_dir(root: Location, topic: str) -> Location:
    return catalog_dir(root, topic) / "source-gaps"


def gap_path(root: Location, topic: str, partition: int, first: int) -> Location:
    return gaps_dir(root, topic) / f"partition_{partition:03d}_from_{first}.json"


def record_gap(root: Location, topic: str, partition: int, first: int, last: int, *, how: str = READ) -> SourceGap:
    """Record ``first..last`` as lost at the source (durable on return), now: a wider range already there is kept,
    with this time (a run that finds the range again reports it again)."""
    path = gap_path(root, topic, partition, first)
    if exists(path):
        try:
            known = SourceGap.decode(read_limited(path, _MAX_DOCUMENT), file=str(path))
        except FormatError:
            known = None  # a torn or foreign file: the new record replaces it
        if known is not None and (known.topic, known.partition) == (topic, partition):
            last = max(last, known.last)
    gap = SourceGap(topic, partition, first, last, int(time.time() * 1000), how)
    write_whole(path, gap.encode())
    return gap


def gap_records(root: Location, topic: str) -> dict[str, SourceGap]:
    """A topic's gap records as they are, by file name (not merged): what changed since a look is told by them."""
    directory = gaps_dir(root, topic)
    found = {}
    for name in sorted(storage_for(directory).list_files(directory) or []):
        if name.startswith("partition_") and name.endswith(".json"):
            path = directory / name
            gap = SourceGap.decode(read_limited(path, _MAX_DOCUMENT), file=str(path))
            if gap.topic != topic:
                raise FormatError("a source gap record of another topic", file=str(path), found=gap.describe())
            found[name] = gap
    return found


def read_gaps(root: Location, topic: str, partition: int | None = None) -> list[SourceGap]:
    """The recorded gaps of a topic (or one partition), by partition and offset, overlapping ones merged."""
    prefix = "partition_" if partition is None else f"partition_{partition:03d}_from_"
    found = [gap for name, gap in gap_records(root, topic).items() if name.startswith(prefix)]
    if partition is not None and any(gap.partition != partition for gap in found):
        wrong = next(gap for gap in found if gap.partition != partition)
        raise FormatError("a source gap record of another partition", file=str(gaps_dir(root, topic)),
                          found=wrong.describe())  # fmt: skip
    return merge(found)


def merge(gaps: Iterable[SourceGap]) -> list[SourceGap]:
    """Gaps sorted by partition and offset, overlapping or adjacent ones of a partition as one."""
    merged: list[SourceGap] = []
    for gap in sorted(gaps, key=lambda g: (g.topic, g.partition, g.first, g.last)):
        last = merged[-1] if merged else None
        if (
            last is not None
            and (last.topic, last.partition) == (gap.topic, gap.partition)
            and gap.first <= last.last + 1
        ):
            how = last.how if last.how == gap.how else INFERRED
            merged[-1] = SourceGap(gap.topic, gap.partition, last.first, max(last.last, gap.last),
                                   max(last.seen_at, gap.seen_at), how)  # fmt: skip
        else:
            merged.append(gap)
    return merged


def describe_gaps(gaps: list[SourceGap], *, shown: int = 3) -> str:
    """``"12 offsets deleted at the source before they were read: 40..51"`` (empty without gaps)."""
    if not gaps:
        return ""
    total = sum(gap.count for gap in gaps)
    spans = [str(g.first) if g.first == g.last else f"{g.first}..{g.last}" for g in gaps[:shown]]
    more = f" and {len(gaps) - shown} more" if len(gaps) > shown else ""
    noun = "offset" if total == 1 else "offsets"
    return f"{total} {noun} deleted at the source before they were read: {', '.join(spans)}{more}"
