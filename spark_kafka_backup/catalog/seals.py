"""Seal records: what the encryption key vouches for in a partition, so a sealed backup cannot be downgraded.

An encrypted segment is authenticated by AES-GCM under a data key only the key-encryption key (KEK) unwraps, but a
plain segment is authenticated by nothing: someone with write access to the storage could put a plain segment of
chosen records where a sealed one was, or cut the partition index short, and delete the catalog. The seal record
closes that: one JSON document per partition, ``STATE/catalog/<topic>/partition_PPP.seals.json``, written by the
backup's writers as they seal, authenticated by an HMAC under a key derived from the KEK
(:func:`spark_kafka_backup.format.encryption.record_mac`), so no one without the key can write or change it::

    {"version": 1, "topic": T, "partition": P, "keyId": HEX,
     "sealedThrough": OFFSET,          start offset of the newest segment sealed holding records (-1: none yet)
     "newest": NAME,                   that segment's name (null: none yet)
     "plain": [[NAME, SHA256], ...],   segments stored plain before the partition was first sealed (vouched for as
                                       found; their SHA-256 binds their bytes)
     "mac": HEX}                        HMAC-SHA256 of the canonical JSON of the rest

With a key given, a reader (``verify``, ``cat``, ``restore``, ``merge``) holds each partition to it before it
prints or produces anything (:func:`seal_problems`): the record exists and authenticates; every segment holding
records is sealed and opens with a given key, or is a vouched plain one, or is the newest segment still being
written (above ``sealedThrough``; the one before it too while the newest holds nothing: a writer killed between
starting a segment and sealing the previous one); and the segment ``newest`` is in the partition index, at
``sealedThrough`` (``prune`` and ``merge`` leave it, and the vouched plain segments, as they are).

Crash safety: the record is replaced whole after the segments it counts are sealed and named; a kill before that
leaves it behind the files, which only means fewer segments are required to be sealed. What it does not protect
against is said in docs/backup.md (a rollback of every file of a partition to an older state, the newest
segment while it is written, a sealed segment swapped for another sealed with the same key).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, replace

from spark_kafka_backup.catalog.model import PartitionCatalog
from spark_kafka_backup.catalog.store import catalog_dir, read_catalog
from spark_kafka_backup.errors import DecryptionKeyError, FormatError, UsageError
from spark_kafka_backup.format.encryption import BLOCK_SIZE, FileCipher, KeyRing, key_id, record_mac
from spark_kafka_backup.format.frames import ENCRYPTED, HEADER, is_framed
from spark_kafka_backup.format.json_document import parse_document
from spark_kafka_backup.format.naming import RECORDS_SUFFIX, check_partition, check_segment_name, check_topic_name
from spark_kafka_backup.format.partition_index import PartitionIndexEntry
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.storage import Location, exists, read_chunks, read_limited, storage_for, write_whole

SEALS_VERSION = 1
_MAX_BYTES = 1 << 26
_HEAD = HEADER.size + BLOCK_SIZE


def seal_record_path(root: Location, topic: str, partition: int) -> Location:
    return catalog_dir(root, topic) / f"partition_{partition:03d}.seals.json"


@dataclass(frozen=True)
class SealRecord:
    topic: str
    partition: int
    key_id: bytes
    sealed_through: int = -1
    plain: tuple[tuple[str, str], ...] = ()
    newest: str | None = None

    def _body(self) -> bytes:
        document = {
            "version": SEALS_VERSION,
            "topic": self.topic,
            "partition": self.partition,
            "keyId": self.key_id.hex(),
            "sealedThrough": self.sealed_through,
            "newest": self.newest,
            "plain": [list(entry) for entry in self.plain],
        }
        return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()

    def encode(self, kek: bytes) -> bytes:
        if key_id(kek) != self.key_id:
            raise ValueError("a seal record is authenticated by the key it names")
        document = json.loads(self._body())
        document["mac"] = record_mac(kek, self._body()).hex()
        return json.dumps(document, indent=1, sort_keys=True).encode() + b"\n"

    @classmethod
    def decode(cls, data: bytes, *, file: str, keys: KeyRing) -> SealRecord:
        """The record, its MAC checked with the given key it names (:class:`DecryptionKeyError` without it; a
        :class:`FormatError` naming the file when it is not one or fails authentication)."""
        document = parse_document(data, file=file, what="seal record")
        try:
            if document.get("version") != SEALS_VERSION:
                raise FormatError("unsupported seal record version", file=file, found=repr(document.get("version")))
            plain = tuple(
                (check_segment_name(name, file=file), str(digest)) for name, digest in document.get("plain", ())
            )
            through, newest = document["sealedThrough"], document.get("newest")
            if isinstance(through, bool) or not isinstance(through, int) or not -1 <= through < 2**63:
                raise FormatError("not a seal record: sealedThrough is not an offset", file=file, found=repr(through))
            record = cls(
                check_topic_name(document["topic"], file=file),
                check_partition(document["partition"], file=file),
                bytes.fromhex(str(document["keyId"])),
                through,
                plain,
                None if newest is None else check_segment_name(newest, file=file),
            )
            mac = bytes.fromhex(str(document["mac"]))
        except FormatError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise FormatError(f"not a valid seal record ({type(exc).__name__}: {exc})", file=file) from exc
        kek = keys.keys.get(record.key_id)
        if kek is None:
            given = f"the key(s) given have id(s) {keys.describe()}" if keys.keys else "no key was given"
            raise DecryptionKeyError(f"{file}: the seal record is authenticated by key id {record.key_id.hex()}; "
                                     f"{given}")  # fmt: skip
        if not hmac.compare_digest(mac, record_mac(kek, record._body())):
            raise FormatError("the seal record fails authentication with its key (it was changed)", file=file)
        return record


def read_seal_record(root: Location, topic: str, partition: int, keys: KeyRing) -> SealRecord | None:
    path = seal_record_path(root, topic, partition)
    if not exists(path):
        return None
    record = SealRecord.decode(read_limited(path, _MAX_BYTES), file=str(path), keys=keys)
    if (record.topic, record.partition) != (topic, partition):
        raise FormatError("a seal record of another partition", file=str(path),
                          found=f"topic {record.topic!r} partition {record.partition}")  # fmt: skip
    return record


def pinned_names(root: Location, topic: str, partition: int, *, plain: bool = True) -> set[str]:
    """The segments the partition's seal record names, read without a key: its newest sealed one, which ``prune``
    and ``merge`` leave as they are, and (``plain``) the vouched plain ones, which ``merge`` leaves (a merged one
    would no longer be the one vouched for; deleting one is fine); a record that cannot be read names none."""
    path = seal_record_path(root, topic, partition)
    if not exists(path):
        return set()
    try:
        document = parse_document(read_limited(path, _MAX_BYTES), file=str(path), what="seal record")
        newest = document.get("newest")
        vouched = {str(name) for name, _ in document.get("plain", ())} if plain else set()
        return vouched | ({str(newest)} if newest else set())
    except (FormatError, ValueError, TypeError, AttributeError):
        return set()


# -- writing (the backup's writers, through the catalog ledger) ------------------------------------------------


def vouch(
    root: Location, topic_dir: Location, partition: int, kek: bytes, *, catalog: PartitionCatalog | None = None
) -> SealRecord:
    """Bring the partition's seal record up to what is sealed now (after the writer sealed and cataloged).

    Created on first use: plain segments holding records are vouched for as found only when no segment file is sealed
    yet (a backup that turns encryption on; told by the files' headers, never by the catalog, which anyone can rewrite);
    a partition already holding sealed segments and no record this key opens (written before seal records existed, its
    record deleted or changed, or the key rotated) gets one that vouches for no plain segment (``spark-kafka-backup
    catalog rebuild`` with the keys vouches for the partition as it is, when that is what is wanted).
    """
    topic = topic_dir.name
    path = seal_record_path(root, topic, partition)
    ring = KeyRing.of([kek])
    current: SealRecord | None = None
    if exists(path):
        try:
            current = read_seal_record(root, topic, partition, ring)
        except DecryptionKeyError:
            current = None  # another key's: the partition is vouched for anew under this one
    if current is None:
        found = _newest_sealed_file(topic_dir, partition)
        if found is None:
            updated = SealRecord(topic, partition, key_id(kek), -1, _plain_segments(topic_dir, partition))
        else:
            updated = SealRecord(topic, partition, key_id(kek), found.start_offset, (), found.name)
        write_whole(path, updated.encode(kek))
        return updated
    if catalog is None:  # the caller's, when it has just read it
        catalog = read_catalog(root, topic, partition)
    sealed = [entry for entry in (catalog.segments if catalog else ()) if entry.key_id and entry.records]
    newest = max(sealed, key=lambda entry: entry.start_offset, default=None)
    through = newest.start_offset if newest is not None else -1
    name = newest.name if newest is not None else None
    if through <= current.sealed_through:
        return current
    updated = replace(current, sealed_through=through, newest=name)
    write_whole(path, updated.encode(kek))
    return updated


def rename_sealed(root: Location, topic_dir: Location, partition: int, keys: KeyRing, renamed: dict[str, str]) -> None:
    """After segments were rewritten under new names (``erase``): the seal record names the new ones, and a vouched
    plain one by its new bytes. Nothing to do where the record names none of them; otherwise it needs the record's key
    (among ``keys``), or raises naming it."""
    topic = topic_dir.name
    if not pinned_names(root, topic, partition) & set(renamed):
        return
    record = read_seal_record(root, topic, partition, keys)
    if record is None:
        return
    kek = keys.keys.get(record.key_id)
    if kek is None:
        raise DecryptionKeyError(
            f"{seal_record_path(root, topic, partition)}: names segments an erase rewrote; it is authenticated by key "
            f"id {record.key_id.hex()}, which finishing the erase needs (--encryption-key-file or "
            "--encryption-key-env)"
        )
    plain = tuple(
        (renamed[name], _sha256(topic_dir / (renamed[name] + RECORDS_SUFFIX))) if name in renamed else (name, digest)
        for name, digest in record.plain
    )
    newest = renamed.get(record.newest, record.newest) if record.newest is not None else None
    write_whole(seal_record_path(root, topic, partition), replace(record, plain=plain, newest=newest).encode(kek))


def _newest_sealed_file(topic_dir: Location, partition: int) -> PartitionIndexEntry | None:
    """The newest segment whose records file is sealed and whose index lists records, by the files themselves."""
    if not exists(topic_dir / f"index_partition_{partition:03d}"):
        return None
    reader = PartitionReader(topic_dir, partition)
    sealed = [s for s in reader.segments if _sealed_head(reader, s).sealed and _indexes_records(reader, s)]
    return sealed[-1] if sealed else None


def refuse_plain_writer(root: Location, topic: str, partition: int) -> None:
    """Refuse a writer without a key on a partition that has a seal record: what it finished would be plain
    segments in a sealed partition, which every reader with the key refuses as put there by someone else."""
    path = seal_record_path(root, topic, partition)
    if not exists(path):
        return
    try:
        named = str(parse_document(read_limited(path, _MAX_BYTES), file=str(path), what="seal record")["keyId"])
    except (FormatError, KeyError, TypeError):
        named = "unknown"
    raise UsageError(
        f"{topic}/{partition} is written with a key (key id {named}, seal record {path}): give the backup its key "
        "(--encryption-key-file or --encryption-key-env); segments written plain would be refused by every reader"
    )


def vouch_as_found(root: Location, topic_dir: Location, partition: int, kek: bytes) -> SealRecord:
    """A new seal record for the partition as it is (``catalog rebuild`` with a key: the operator vouches)."""
    newest = _newest_sealed_file(topic_dir, partition)
    through = newest.start_offset if newest is not None else -1
    record = SealRecord(topic_dir.name, partition, key_id(kek), through, _plain_segments(topic_dir, partition),
                        newest.name if newest is not None else None)  # fmt: skip
    write_whole(seal_record_path(root, topic_dir.name, partition), record.encode(kek))
    return record


def _plain_segments(topic_dir: Location, partition: int) -> tuple[tuple[str, str], ...]:
    """The finished segments stored plain and holding records, with the SHA-256 of their records file."""
    if not exists(topic_dir / f"index_partition_{partition:03d}"):
        return ()
    reader = PartitionReader(topic_dir, partition)
    found = []
    for segment in reader.segments[:-1]:
        records, _ = reader.segment_paths(segment)
        head = _sealed_head(reader, segment)
        if not head.sealed and head.size > 1:
            found.append((segment.name, _sha256(records)))
    return tuple(found)


# -- reading ---------------------------------------------------------------------------------------------------


def seal_problems(
    root: Location, topic: str, partition: int, reader: PartitionReader, keys: KeyRing, *, unrecorded_ok: bool = False
) -> list[str]:
    """What in the partition the given keys do not vouch for (empty: all of it), one line each (module docstring);
    ``unrecorded_ok`` (``--allow-unauthenticated``): a partition without a seal record is read as it is."""
    where = f"{topic}/{partition}"
    try:
        record = read_seal_record(root, topic, partition, keys)
    except (FormatError, DecryptionKeyError) as exc:
        return [f"{where}: {exc}"]
    heads = [_sealed_head(reader, segment, keys) for segment in reader.segments]
    problems = [f"{where}: {head.refused}" for head in heads if head.refused is not None]
    if record is None:
        if not unrecorded_ok and any(head.size > 1 for head in heads):
            path = seal_record_path(root, topic, partition)
            return [f"{where}: no seal record ({path}) although a key was given: a partition written with a key has "
                    "one (it was deleted, or the partition was not written with a key: --allow-unauthenticated "
                    "reads it as it is)", *problems]  # fmt: skip
        return problems
    vouched = dict(record.plain)
    newest = len(reader.segments) - 1
    for number, (segment, head) in enumerate(zip(reader.segments, heads, strict=True)):
        if head.sealed or head.size <= 1:
            continue
        if segment.name in vouched:
            if _sha256(reader.segment_paths(segment)[0]) == vouched[segment.name]:
                continue
            problems.append(f"{where}: segment {segment.name} is not the plain segment the seal record vouches for: "
                            "it was changed")  # fmt: skip
            continue
        open_one = number == newest or (number == newest - 1 and heads[newest].size <= 1)
        if open_one and segment.start_offset > record.sealed_through:
            continue  # still being written (or its sealing was cut short by a kill): never sealed yet
        problems.append(
            f"{where}: segment {segment.name} is stored plain, but the partition is sealed with key id "
            f"{record.key_id.hex()} (seal record): it was put there after the backup wrote it (or, written before "
            "the partition's first key and the key changed since, it is vouched for again by spark-kafka-backup "
            "catalog rebuild "
            "with every key: see docs/backup.md)"
        )
    if record.sealed_through >= 0:
        at = {segment.name: segment.start_offset for segment in reader.segments}
        if not reader.segments or reader.segments[-1].start_offset < record.sealed_through:
            problems.append(f"{where}: the partition index ends before offset {record.sealed_through}, where the seal "
                            "record says a sealed segment starts: segments were removed")  # fmt: skip
        elif record.newest is not None and at.get(record.newest) != record.sealed_through:
            problems.append(f"{where}: the newest sealed segment {record.newest} (offset {record.sealed_through}) is "
                            "not in the partition index: it was removed or replaced")  # fmt: skip
    return problems


def _sealed_head(reader: PartitionReader, segment: PartitionIndexEntry, keys: KeyRing | None = None) -> _Head:
    """Whether the segment's records file is sealed (encrypted; with ``keys``, a data key that fails to unwrap
    under the given key it names is the reason it is refused), and its stored size."""
    records, _ = reader.segment_paths(segment)
    handle = storage_for(records).open_read(records)
    try:
        size = handle.size
        head = handle.pread(_HEAD, 0) if size >= _HEAD else b""
    finally:
        handle.close()
    if len(head) < _HEAD or not is_framed(head) or not HEADER.unpack_from(head)[3] & ENCRYPTED:
        return _Head(False, size)
    if keys is not None:
        try:
            FileCipher.open(head[HEADER.size : _HEAD], keys, file=str(records))
        except DecryptionKeyError:
            pass  # sealed under a key not given: still sealed; a reader of its records names the key it needs
        except FormatError as exc:
            return _Head(True, size, str(exc))  # its data key does not open: changed
    return _Head(True, size)


@dataclass(frozen=True)
class _Head:
    sealed: bool
    size: int
    #: Why a sealed file does not open with the keys given (``None``: it does, or no keys were asked).
    refused: str | None = None


def _indexes_records(reader: PartitionReader, segment: PartitionIndexEntry) -> bool:
    """Whether the segment's index lists any record (more than its magic byte)."""
    index = reader.segment_paths(segment)[1]
    return (storage_for(index).size(index) or 0) > 1


def _sha256(location: Location) -> str:
    digest = hashlib.sha256()
    for piece in read_chunks(location):
        digest.update(piece)
    return digest.hexdigest()
