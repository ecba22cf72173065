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
from typing import Any

from spark_kafka_backup.errors import SchemaIdError
from spark_kafka_backup.format.record import Record

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
    #: The target registry (without credentials).
    registry: str = ""
    #: Fields not rewritten whose ids are still checked: a record there naming a schema id of the backup that has
    #: another id in the target stops the restore (the field is in the wire format after all: see ``--schema-ids``).
    check_key: bool = False
    check_value: bool = False
    #: A dry run before the schemas are registered: ids without a target id yet pass unchanged.
    lenient: bool = False

    @property
    def rewrites(self) -> bool:
        """Whether record bytes may change (a field is rewritten)."""
        return self.key or self.value

    @property
    def active(self) -> bool:
        """Whether the restore has anything to do with its records (rewrite or check a field)."""
        return self.key or self.value or self.check_key or self.check_value

    def identity_part(self) -> dict[str, Any]:
        """What the restore's identity names of this rewrite: where the ids come from and which fields change."""
        return {"registry": self.registry, "key": self.key, "value": self.value}

    def record(self, record: Record, *, topic: str, partition: int) -> Record:
        """``record`` with its key and value naming the target's schema ids (the same record when nothing moves)."""
        key, value = record.key, record.value
        # Inline checks: this runs once per restored record.
        if key is not None and len(key) >= HEADER_SIZE and key[0] == MAGIC:
            if self.key:
                key = self._moved(key, "key", record.offset, topic, partition)
            elif self.check_key:
                self._unmoved(key, "key", record.offset, topic, partition)
        if value is not None and len(value) >= HEADER_SIZE and value[0] == MAGIC:
            if self.value:
                value = self._moved(value, "value", record.offset, topic, partition)
            elif self.check_value:
                self._unmoved(value, "value", record.offset, topic, partition)
        if key is record.key and value is record.value:
            return record
        return Record(record.offset, record.timestamp_type, record.timestamp, key, value, record.headers)

    def _moved(self, data: bytes, what: str, offset: int, topic: str, partition: int) -> bytes:
        found = _ID.unpack_from(data, 1)[0]
        new = self.ids.get(found)
        if new is None:
            if self.lenient:
                return data
            raise unknown_id(found, what, topic=topic, partition=partition, offset=offset)
        return data if new == found else with_schema_id(data, new)

    def _unmoved(self, data: bytes, what: str, offset: int, topic: str, partition: int) -> None:
        found = _ID.unpack_from(data, 1)[0]
        new = self.ids.get(found, found)
        if new != found:
            raise moved_id(found, new, what, topic=topic, partition=partition, offset=offset)


def unknown_id(found: int, what: str, *, topic: str, partition: int, offset: int) -> SchemaIdError:
    """A record's ``what`` (key or value) names a schema id the backup's copy of the registry lacks."""
    return SchemaIdError(
        f"topic {topic!r} partition {partition} offset {offset}: the {what} names schema id {found}, which "
        "the backup's copy of the schema registry does not hold (registered after the last capture, or "
        "not in the registry's format); this record and those after it were not produced. Capture the "
        "registry again (spark-kafka-backup schemas capture) and run the restore again",
        schema_id=found,
        field=what,
    )


def moved_id(found: int, new: int, what: str, *, topic: str, partition: int, offset: int) -> SchemaIdError:
    """A record's ``what``, which the restore does not rewrite, names a schema id that is another in the target."""
    return SchemaIdError(
        f"topic {topic!r} partition {partition} offset {offset}: the {what} looks like the wire format of "
        f"schema id {found}, which is {new} in the target registry, but the restore does not rewrite the "
        f"{what}s of {topic!r} (the backup holds no {topic}-{what} subject): restored as it is, it would "
        f"name another schema. Say what the {what}s are: --schema-ids {topic}="
        + ("keys-and-values" if what == "key" else "values")
        + f" rewrites them, --schema-ids {topic}=none restores the topic's records as they are",
        schema_id=found,
        field=what,
    )
