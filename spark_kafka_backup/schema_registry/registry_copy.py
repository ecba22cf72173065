"""The backup's copy of a schema registry: every schema, subject version and compatibility setting it held.

``ROOT/kbackup~state/schema-registry.json`` (format: ``formats/schema-registry.md``), replaced whole. Captures
only add to it: a version deleted from the registry since an earlier capture stays, marked deleted, because
records already backed up may name its id. Two captures that disagree about an id or a subject version are two
different registries, and the backup refuses to mix them (:meth:`RegistryCopy.merged`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from spark_kafka_backup.errors import FormatError, SchemaRegistryError
from spark_kafka_backup.format.json_document import MAX_TIME_MS, parse_document
from spark_kafka_backup.text import count

REGISTRY_COPY_VERSION = 1

#: Schema types a Confluent-compatible registry knows (``AVRO`` when a registry leaves it out).
SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")


@dataclass(frozen=True)
class SchemaReference:
    """A schema's import of another subject's version (Protobuf imports, JSON ``$ref``, Avro named types)."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class Schema:
    """One schema as the registry stores it, under its id (the same id whatever the subjects that use it)."""

    id: int
    schema: str
    schema_type: str = "AVRO"
    references: tuple[SchemaReference, ...] = ()

    def same_as(self, other: Schema) -> bool:
        """The same schema, written alike or not: Avro and JSON schemas compare as JSON (a registry upgrade may print
        them otherwise), Protobuf ones as text."""
        if (self.id, self.schema_type, self.references) != (other.id, other.schema_type, other.references):
            return False
        if self.schema == other.schema:
            return True
        if self.schema_type == "PROTOBUF":
            return False
        try:
            return bool(json.loads(self.schema) == json.loads(other.schema))
        except ValueError:
            return False


@dataclass(frozen=True)
class SubjectVersion:
    version: int
    id: int
    #: Deleted from the registry (soft-deleted, or gone since an earlier capture): kept for records that name it.
    deleted: bool = False


@dataclass(frozen=True)
class Subject:
    name: str
    versions: tuple[SubjectVersion, ...] = ()
    #: The subject's own compatibility level (``None``: it follows the registry's).
    compatibility: str | None = None

    def version(self, number: int) -> SubjectVersion | None:
        return next((v for v in self.versions if v.version == number), None)


@dataclass(frozen=True)
class RegistryCopy:
    #: Where it was captured (credentials removed).
    registry: str
    captured_at: int  # epoch ms of the capture that last changed it
    compatibility: str | None = None  # the registry's own level
    mode: str | None = None
    schemas: Mapping[int, Schema] = field(default_factory=dict)
    subjects: Mapping[str, Subject] = field(default_factory=dict)

    def describe(self) -> str:
        """``N subjects, N versions, N schemas`` (for messages)."""
        versions = sum(len(subject.versions) for subject in self.subjects.values())
        subjects, schemas = count(len(self.subjects), "subject"), count(len(self.schemas), "schema")
        return f"{subjects}, {count(versions, 'version')}, {schemas}"

    def content(self) -> tuple[Any, ...]:
        """Everything but the capture time (whether a capture changed anything)."""
        return (self.compatibility, self.mode, dict(self.schemas), dict(self.subjects))

    def merged(self, newer: RegistryCopy) -> RegistryCopy:
        """This copy updated by a newer capture of the same registry.

        The newer capture's settings and deletion marks win; schemas and versions it no longer lists stay, marked
        deleted. Raises :class:`SchemaRegistryError` when the two disagree on what an id or a subject version is:
        then they are not the same registry (or it was wiped and refilled), and one backup cannot hold both.
        """
        schemas = dict(self.schemas)
        for schema_id, schema in newer.schemas.items():
            known = schemas.get(schema_id)
            if known is not None and not known.same_as(schema):
                raise SchemaRegistryError(
                    f"schema registry {newer.registry}: schema id {schema_id} is another schema than the one this "
                    f"backup's copy holds under that id (captured from {self.registry}); records already backed up "
                    "name the old one. Back up into a new target"
                )
            schemas[schema_id] = schema
        subjects: dict[str, Subject] = {}
        for name in sorted(set(self.subjects) | set(newer.subjects)):
            old, new = self.subjects.get(name), newer.subjects.get(name)
            if new is None:
                assert old is not None
                subjects[name] = replace(old, versions=tuple(replace(v, deleted=True) for v in old.versions))
                continue
            versions = {v.version: v for v in new.versions}
            for kept in old.versions if old is not None else ():
                now = versions.get(kept.version)
                if now is None:
                    versions[kept.version] = replace(kept, deleted=True)
                elif now.id != kept.id:
                    raise SchemaRegistryError(
                        f"schema registry {newer.registry}: subject {name!r} version {kept.version} is schema id "
                        f"{now.id}, but this backup's copy holds id {kept.id} there: the subject was deleted for good "
                        "and registered again, or the registry was replaced. Back up into a new target"
                    )
            subjects[name] = replace(new, versions=tuple(versions[v] for v in sorted(versions)))
        return RegistryCopy(newer.registry, newer.captured_at, newer.compatibility, newer.mode, schemas, subjects)

    def encode(self) -> bytes:
        document: dict[str, Any] = {
            "version": REGISTRY_COPY_VERSION,
            "registry": self.registry,
            "capturedAt": self.captured_at,
            "compatibility": self.compatibility,
            "mode": self.mode,
            "schemas": [_encode_schema(self.schemas[i]) for i in sorted(self.schemas)],
            "subjects": [_encode_subject(self.subjects[name]) for name in sorted(self.subjects)],
        }
        return json.dumps(document, indent=1, ensure_ascii=False).encode() + b"\n"

    @classmethod
    def decode(cls, data: bytes, *, file: str) -> RegistryCopy:
        try:
            document = parse_document(data, file=file, what="schema registry copy")
            if not isinstance(document, dict):
                raise FormatError("not a schema registry copy", file=file, expected="a JSON object")
            if document.get("version") != REGISTRY_COPY_VERSION:
                raise FormatError(
                    "unsupported schema registry copy version", file=file, found=repr(document.get("version"))
                )
            schemas = {}
            for item in document["schemas"]:
                schema = _decode_schema(item)
                if schema.id in schemas:
                    raise FormatError(f"schema id {schema.id} is listed twice", file=file)
                schemas[schema.id] = schema
            subjects = {}
            for item in document["subjects"]:
                subject = _decode_subject(item)
                if subject.name in subjects:
                    raise FormatError(f"subject {subject.name!r} is listed twice", file=file)
                for version in subject.versions:
                    if version.id not in schemas:
                        raise FormatError(
                            f"subject {subject.name!r} version {version.version} names schema id {version.id}, "
                            "which is not listed",
                            file=file,
                        )
                subjects[subject.name] = subject
            for schema in schemas.values():
                for reference in schema.references:
                    target = subjects.get(reference.subject)
                    if target is None or target.version(reference.version) is None:
                        raise FormatError(
                            f"schema id {schema.id} references subject {reference.subject!r} version "
                            f"{reference.version}, which is not listed",
                            file=file,
                        )
            return cls(
                str(document["registry"]),
                _time(document["capturedAt"], file),
                _optional_text(document.get("compatibility")),
                _optional_text(document.get("mode")),
                schemas,
                subjects,
            )
        except FormatError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise FormatError(f"not a valid schema registry copy ({exc!r})", file=file) from exc


def _time(value: object, file: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_TIME_MS:
        raise FormatError("not a schema registry copy: capturedAt is not epoch milliseconds", file=file,
                          found=repr(value)[:40])  # fmt: skip
    return value


def _encode_schema(schema: Schema) -> dict[str, Any]:
    item: dict[str, Any] = {"id": schema.id, "schemaType": schema.schema_type, "schema": schema.schema}
    if schema.references:
        item["references"] = [{"name": r.name, "subject": r.subject, "version": r.version} for r in schema.references]
    return item


def _decode_schema(item: Mapping[str, Any]) -> Schema:
    schema_type = str(item.get("schemaType", "AVRO"))
    if schema_type not in SCHEMA_TYPES:
        raise ValueError(f"unknown schemaType {schema_type!r} of schema id {item.get('id')!r}")
    references = tuple(
        SchemaReference(str(r["name"]), str(r["subject"]), whole_number(r["version"]))
        for r in item.get("references", ())
    )
    if not isinstance(item["schema"], str):
        raise TypeError(f"schema id {item.get('id')!r}: the schema is not text")
    return Schema(whole_number(item["id"]), item["schema"], schema_type, references)


def _encode_subject(subject: Subject) -> dict[str, Any]:
    return {
        "subject": subject.name,
        "compatibility": subject.compatibility,
        "versions": [
            {"version": v.version, "id": v.id, **({"deleted": True} if v.deleted else {})} for v in subject.versions
        ],
    }


def _decode_subject(item: Mapping[str, Any]) -> Subject:
    versions = tuple(
        SubjectVersion(whole_number(v["version"]), whole_number(v["id"]), bool(v.get("deleted", False)))
        for v in item["versions"]
    )
    numbers = [v.version for v in versions]
    if numbers != sorted(set(numbers)):
        raise ValueError(f"versions of subject {item['subject']!r} are not listed once each in order")
    return Subject(str(item["subject"]), versions, _optional_text(item.get("compatibility")))


def whole_number(value: Any) -> int:
    """A JSON number that is a whole number >= 0 (bool is not one); ``ValueError`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a whole number >= 0, found {value!r}")
    return value


def _optional_text(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"expected text or null, found {value!r}")
    return value
