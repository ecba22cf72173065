"""Confluent's wire format, and moving a record's schema ids to another registry's.

A key or value serialized against a Confluent-compatible schema registry
(Avro, Protobuf or JSON Schema serializers) starts with five bytes::

    byte  0       magic, 0x00
    bytes 1..4    the schema's id in that registry, unsigned 32-bit big-endian
    bytes 5..     the serializer's payload (Protobuf message indexes, Avro binary, JSON text), never touched here

Restored into a registry that holds the same schemas under other ids, only
bytes 1..4 change. Bytes that are null, shorter than five bytes or do not start
with 0x00 are not in this format and pass unchanged.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

from kbackup.errors import SchemaIdError
from kbackup.format.record import Record

MAGIC = 0
HEADER_SIZE = 5

_HEADER = struct.Struct(">BI")
_ID = struct.Struct(">I")


def schema_id(data: bytes | None) -> int | None:
    """The schema id that wire-format bytes name; ``None`` for bytes that are not in the format."""
    if data is None or len(data) < HEADER_SIZE or data[0] != MAGIC:
        return None
    return int(_HEADER.unpack_from(data)[1])


def with_schema_id(data: bytes, new_id: int) -> bytes:
    """``data`` (in the wire format) naming ``new_id`` instead; the payload is the same bytes."""
    return data[:1] + _ID.pack(new_id) + data[HEADER_SIZE:]


@dataclass(frozen=True)
class IdRewrite:
    """What a restore does to the schema ids in one topic's records (picklable: it travels to the tasks).

    ``ids`` maps each schema id of the backup's registry copy to the target registry's id of the same schema.
    ``key`` and ``value`` say which fields of the topic's records are in the wire format: those the restore
    rewrites, and where a record naming an id outside ``ids`` stops the restore (:class:`SchemaIdError`) rather
    than reach the target pointing at a schema that is not there, or another one.
    """

    ids: Mapping[int, int] = field(default_factory=dict)
    key: bool = False
    value: bool = False

    def record(self, record: Record, *, topic: str, partition: int) -> Record:
        """``record`` with its key and value naming the target's schema ids (the same record when nothing moves)."""
        key, value = record.key, record.value
        if self.key:
            key = self._moved(key, "key", record.offset, topic, partition)
        if self.value:
            value = self._moved(value, "value", record.offset, topic, partition)
        if key is record.key and value is record.value:
            return record
        return record._replace(key=key, value=value)

    def _moved(self, data: bytes | None, what: str, offset: int, topic: str, partition: int) -> bytes | None:
        found = schema_id(data)
        if found is None:
            return data
        new = self.ids.get(found)
        if new is None:
            raise SchemaIdError(
                f"topic {topic!r} partition {partition} offset {offset}: the {what} names schema id {found}, which "
                "the backup's copy of the schema registry does not hold (registered after the last capture, or "
                "not in the registry's format); this record and those after it were not produced. Capture the "
                "registry again (kbackup schemas capture) and run the restore again",
                schema_id=found,
                field=what,
            )
        assert data is not None
        return data if new == found else with_schema_id(data, new)
