"""The schema ids the backup's records name, per topic: ``ROOT/kbackup~state/schema-ids.json``.

A backup with ``--schema-registry`` has its tasks report the distinct ids in the wire format (a zero byte, then a
4-byte id) among the keys and values they wrote
(:func:`~spark_kafka_backup.schema_registry.wire_columns.wire_schema_ids`); the driver adds the ids of a committed
micro-batch that are not in this file yet before Spark records the batch (:func:`record_seen_ids`), so that the
file holds every id of every record committed. A capture reads it and fetches each id that the registry's subjects
do not show (``GET /schemas/ids/N``): a schema whose subjects were deleted for good before the first capture, or one
that the registry serves by id under no subject the API lists (Apicurio's other groups).

Format: ``{"version": 1, "topics": {"TOPIC": [id, ...]}}`` (with ``"capped": true`` once it holds
:data:`MAX_SEEN_IDS`), topics and ids ascending; replaced whole, only when it grows. Ids the tasks found in data that
only looks like the wire format (raw Avro starting with zeros) are listed too: an id the registry does not hold is
only said, never refused.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from spark_kafka_backup.errors import FormatError
from spark_kafka_backup.format.json_document import parse_document
from spark_kafka_backup.partition.layout import state_dir
from spark_kafka_backup.schema_registry.registry_copy import whole_number
from spark_kafka_backup.storage import Location, exists, read_limited, write_whole

SEEN_IDS_VERSION = 1
#: Distinct ids the file lists at most, over every topic. Keys or values that only look like the wire format (a
#: Java long serializer's big-endian numbers, UUIDs with a leading zero byte) name a new "id" every few records:
#: past this the file stops growing and says so (``"capped": true``), and the job warns once.
MAX_SEEN_IDS = 100_000
#: Largest file read back (:data:`MAX_SEEN_IDS` ids take about 1 MB).
MAX_SEEN_IDS_BYTES = 16 << 20

#: What this process last read or wrote, per backup root: a micro-batch naming only known ids costs no read.
_known: dict[str, dict[str, frozenset[int]]] = {}
#: Backup roots whose list is full (:data:`MAX_SEEN_IDS`).
_full: set[str] = set()


def seen_ids_path(root: Location) -> Location:
    return state_dir(root) / "schema-ids.json"


def read_seen_ids(root: Location) -> dict[str, frozenset[int]]:
    """Each topic's ids named by records backed up (empty without the file)."""
    path = seen_ids_path(root)
    if not exists(path):
        return {}
    try:
        document = parse_document(read_limited(path, MAX_SEEN_IDS_BYTES), file=str(path), what="schema ids")
        if not isinstance(document, dict) or document.get("version") != SEEN_IDS_VERSION:
            raise FormatError("not a schema ids file", file=str(path), expected=f"version {SEEN_IDS_VERSION}")
        return {str(topic): frozenset(map(whole_number, ids)) for topic, ids in document["topics"].items()}
    except FormatError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise FormatError(f"not a valid schema ids file ({exc!r})", file=str(path)) from exc


def record_seen_ids(root: Location, found: Mapping[str, Iterable[int]]) -> bool:
    """Add ``found`` (topic -> ids) to the file, up to :data:`MAX_SEEN_IDS` in all; return whether it grew (it is
    written only then)."""
    if str(root) in _full:
        return False
    wanted = {topic: frozenset(ids) for topic, ids in found.items()}
    cached = _known.get(str(root))
    if cached is not None and all(ids <= cached.get(topic, frozenset()) for topic, ids in wanted.items()):
        return False
    known = read_seen_ids(root)
    room = MAX_SEEN_IDS - sum(map(len, known.values()))
    merged = dict(known)
    for topic, ids in sorted(wanted.items()):
        new = sorted(ids - merged.get(topic, frozenset()))[: max(room, 0)]
        room -= len(new)
        if new:
            merged[topic] = merged.get(topic, frozenset()) | frozenset(new)
    if merged != known:
        document: dict[str, object] = {"version": SEEN_IDS_VERSION}
        if room <= 0:
            document["capped"] = True
        document["topics"] = {t: sorted(merged[t]) for t in sorted(merged)}
        write_whole(seen_ids_path(root), json.dumps(document).encode() + b"\n")
    # Remembered once written (a failed write is tried again with the next batch); a full list is not read again.
    _known[str(root)] = merged
    if room <= 0:
        _full.add(str(root))
    return merged != known


def seen_ids_capped(root: Location) -> bool:
    """Whether the file stopped growing at :data:`MAX_SEEN_IDS`."""
    return sum(map(len, read_seen_ids(root).values())) >= MAX_SEEN_IDS


def all_seen_ids(root: Location) -> frozenset[int]:
    """Every id some backed-up record names."""
    return frozenset().union(*read_seen_ids(root).values())
