"""The catalog document of one partition, and its JSON codec (version 1)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.format.json_document import check_fields, parse_document
from spark_kafka_backup.format.naming import check_partition, check_segment_name, check_topic_name
from spark_kafka_backup.partition.ledger import TailEntry

CATALOG_VERSION = 1


@dataclass(frozen=True)
class SegmentEntry:
    """A finished segment: what it holds and how to check it."""

    name: str
    start_offset: int
    first_offset: int | None
    last_offset: int | None
    records: int
    min_timestamp: int | None
    max_timestamp: int | None
    records_bytes: int
    index_bytes: int
    records_crc32c: int
    index_crc32c: int
    #: A compressed records file (formats/compressed-records.md): its codec, plain size and frame count; ``None``
    #: for a plain one (then left out of the JSON, which stays the same as before compression existed).
    compression: str | None = None
    plain_bytes: int | None = None
    frames: int | None = None
    #: The id (hex) of the key-encryption key an encrypted records file needs (``None``: not encrypted).
    key_id: str | None = None


@dataclass(frozen=True)
class PrunedPrefix:
    """What prunes let go of at the head of a partition, in all: offsets ``first_offset`` to ``last_offset`` (the
    first pruned segment's first record to the last pruned segment's last), ``records`` records. A prune removes a
    prefix of the segments, so successive ones extend one range."""

    first_offset: int
    last_offset: int
    records: int

    def extended(self, first_offset: int, last_offset: int, records: int) -> PrunedPrefix:
        return PrunedPrefix(
            min(self.first_offset, first_offset), max(self.last_offset, last_offset), self.records + records
        )


@dataclass(frozen=True)
class PartitionCatalog:
    topic: str
    partition: int
    segments: tuple[SegmentEntry, ...] = field(default_factory=tuple)
    tail: TailEntry | None = None
    #: The offset from which spark-kafka-backup's writers read the partition without a break (formats/catalog.md): an
    #: offset at or above it that holds no record and is not recorded as lost at the source was read, and the source had
    #: no record there for a consumer (a transaction marker, an aborted record, a record compacted away). ``None``: not
    #: known (written before spark-kafka-backup recorded it, or a catalog rebuilt from the files), so such offsets are
    #: missing.
    read_from: int | None = None
    #: What prunes let go of at the head (``None``: nothing, or pruned before spark-kafka-backup recorded it).
    pruned: PrunedPrefix | None = None

    def encode(self) -> bytes:
        document: dict[str, Any] = {
            "version": CATALOG_VERSION,
            "topic": self.topic,
            "partition": self.partition,
        }
        if self.read_from is not None:
            document["readFrom"] = self.read_from
        document["segments"] = [_camel(_present(asdict(entry))) for entry in self.segments]
        if self.tail is not None:
            document["tail"] = _camel({name: value for name, value in asdict(self.tail).items()
                                       if name not in _TAIL_TIMES})  # fmt: skip
            if self.tail.times:  # apart: a reader before it took "tail" whole, and refused a field it did not know
                document["tailTimes"] = {"name": self.tail.name, "records": self.tail.records,
                                         "minTimestamp": self.tail.min_timestamp,
                                         "maxTimestamp": self.tail.max_timestamp}  # fmt: skip
        if self.pruned is not None:
            document["pruned"] = _camel(asdict(self.pruned))
        return json.dumps(document, indent=1, sort_keys=False).encode() + b"\n"

    def tail_of(self, name: str) -> TailEntry | None:
        """The committed prefix recorded for segment ``name`` while it is the newest, unfinished one."""
        if self.tail is None or self.tail.name != name or any(entry.name == name for entry in self.segments):
            return None
        return self.tail

    @classmethod
    def decode(cls, data: bytes, *, file: str) -> PartitionCatalog:
        try:
            document = parse_document(data, file=file, what="partition catalog")
            if document.get("version") != CATALOG_VERSION:
                raise FormatError(
                    "unsupported catalog version",
                    file=file,
                    expected=str(CATALOG_VERSION),
                    found=repr(document.get("version")),
                )
            segments = tuple(
                SegmentEntry(**check_fields(SegmentEntry, _snake(item), file=file, what="catalog entry"))
                for item in document["segments"]
            )
            tail_fields = document.get("tail")
            tail = None
            if tail_fields is not None:
                tail = TailEntry(**check_fields(TailEntry, _snake(tail_fields), file=file, what="catalog tail"))
                tail = _with_times(tail, document.get("tailTimes"), file=file)
            for entry in (*segments, *(() if tail is None else (tail,))):
                check_segment_name(entry.name, file=file, what="a catalog entry")
            topic = check_topic_name(document["topic"], file=file)
            read_from = document.get("readFrom")
            if read_from is not None and (type(read_from) is not int or read_from < 0):
                raise FormatError("invalid readFrom", file=file, expected="an offset", found=repr(read_from)[:40])
            pruned_fields = document.get("pruned")
            pruned = None
            if pruned_fields is not None:
                values = check_fields(PrunedPrefix, _snake(pruned_fields), file=file, what="catalog pruned range")
                pruned = PrunedPrefix(**values)
            return cls(topic, check_partition(document["partition"], file=file), segments, tail, read_from, pruned)
        except FormatError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise FormatError(f"catalog is not a valid partition catalog ({exc})", file=file) from exc


#: The tail's fields written apart, as ``tailTimes`` (formats/catalog.md).
_TAIL_TIMES = ("min_timestamp", "max_timestamp", "times")


def _with_times(tail: TailEntry, times: Any, *, file: str) -> TailEntry:
    """``tail`` with the time range ``tailTimes`` gives it, when that describes the same prefix (a writer that did
    not know ``tailTimes`` may have recorded another since: then it says nothing)."""
    if times is None:
        return tail
    if not isinstance(times, dict):
        raise FormatError("invalid tailTimes", file=file, expected="an object", found=repr(times)[:40])
    low, high = times.get("minTimestamp"), times.get("maxTimestamp")
    for value in (low, high):
        if value is not None and type(value) is not int:
            raise FormatError("invalid tailTimes", file=file, expected="ms or null", found=repr(value)[:40])
    if times.get("name") != tail.name or times.get("records") != tail.records or (low is None) != (high is None):
        return tail
    return replace(tail, min_timestamp=low, max_timestamp=high, times=True)


_FIELDS = {
    "name": "name",
    "start_offset": "startOffset",
    "first_offset": "firstOffset",
    "last_offset": "lastOffset",
    "records": "records",
    "min_timestamp": "minTimestamp",
    "max_timestamp": "maxTimestamp",
    "records_bytes": "recordsBytes",
    "index_bytes": "indexBytes",
    "records_crc32c": "recordsCrc32c",
    "index_crc32c": "indexCrc32c",
    "compression": "compression",
    "plain_bytes": "plainBytes",
    "frames": "frames",
    "key_id": "keyId",
}
_OPTIONAL = ("compression", "plain_bytes", "frames", "key_id")
_BACK = {value: key for key, value in _FIELDS.items()}


def _present(item: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in item.items() if key not in _OPTIONAL or value is not None}


def _camel(item: dict[str, Any]) -> dict[str, Any]:
    return {_FIELDS[key]: value for key, value in item.items()}


def _snake(item: dict[str, Any]) -> dict[str, Any]:
    unknown = set(item) - set(_BACK)
    if unknown:
        raise KeyError(f"unknown segment field(s) {sorted(unknown)}")
    return {_BACK[key]: value for key, value in item.items()}
