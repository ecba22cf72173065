"""The ``spark-kafka-backup`` command: look inside v1 backups and repair their indexes.

Every user mistake or damaged file ends as one line on stderr and exit code 1
(argument errors: argparse's usage message and exit code 2).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO, cast

from spark_kafka_backup import __version__
from spark_kafka_backup.boundary import exit_code
from spark_kafka_backup.catalog.source_gaps import SourceGap, describe_gaps, read_gaps
from spark_kafka_backup.catalog.store import read_catalog
from spark_kafka_backup.errors import BackupNotFoundError, KbackupError, UsageError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.naming import INDEX_SUFFIX, parse_partition_index_file_name
from spark_kafka_backup.format.partition_index import decode_partition_index
from spark_kafka_backup.format.record import Record, TimestampType
from spark_kafka_backup.fsutil import restrict_new_files
from spark_kafka_backup.job_options import add_encryption_flags, add_schema_registry_flags, encryption_key_sources
from spark_kafka_backup.partition.layout import STATE_DIR, list_partitions, list_segment_files, list_topics
from spark_kafka_backup.partition.offsets_file import read_consumer_offsets
from spark_kafka_backup.partition.reader import MAX_PARTITION_INDEX_SIZE, PartitionReader
from spark_kafka_backup.partition.rebuild import rebuild_partition_index, rebuild_segment_index
from spark_kafka_backup.partition.records_file import install_keys, installed_keys
from spark_kafka_backup.partition.segment_reader import SegmentIndexFile
from spark_kafka_backup.partition.writer import DEFAULT_MAX_SEGMENT_SIZE
from spark_kafka_backup.progress import Progress
from spark_kafka_backup.report.summary import (
    OffsetRange,
    describe_missing,
    describe_skipped,
    is_compacted,
    missing_offsets,
)
from spark_kafka_backup.storage import Location, as_local, exists, parse_location, read_limited, storage_for
from spark_kafka_backup.text import TerminalText, count, shown, shown_json, shown_text

_TIMESTAMP_TYPE_NAMES = {
    TimestampType.NO_TIMESTAMP: "NoTimestampType",
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
    TimestampType.CREATE_TIME_NULL: "CreateTime",
}


def record_to_json(topic: str, partition: int, record: Record) -> dict[str, object]:
    """The ``spark-kafka-backup cat`` view of a record: exactly these keys, bytes as base64."""
    return {
        "topic": topic,
        "partition": partition,
        "offset": record.offset,
        "timestampType": _TIMESTAMP_TYPE_NAMES[TimestampType(record.timestamp_type)],
        "timestamp": record.timestamp,
        "key": _b64(record.key),
        "value": _b64(record.value),
        "headers": [[key, _b64(value)] for key, value in record.headers],
    }


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


# -- backup root navigation ------------------------------------------------


def _topics(root: Location, only: str | None) -> list[str]:
    topics = list_topics(root)
    if not topics and list_partitions(root):
        raise UsageError(f"{root} is a topic directory; pass the backup root {root.parent} and --topic {root.name}")
    if not topics and STATE_DIR not in (storage_for(root).list_dirs(root) or []):
        raise BackupNotFoundError(
            f"{root}: not a spark-kafka-backup backup: no topic directory with a partition index in it, and no "
            f"{STATE_DIR}/ "
            "(give the backup root, the directory that holds one directory per topic)"
        )
    if only is None:
        return topics
    if only not in topics:
        shown = ", ".join(topics) or "none"
        raise BackupNotFoundError(f"topic {only!r} is not in backup {root} (topics: {shown})")
    return [only]


def _partitions(topic_dir: Location, only: int | None) -> list[int]:
    partitions = list_partitions(topic_dir)
    if only is None:
        return partitions
    if only not in partitions:
        raise BackupNotFoundError(
            f"partition {only} of topic {topic_dir.name!r} is not in the backup "
            f"(partitions: {', '.join(map(str, partitions)) or 'none'})"
        )
    return [only]


# -- commands -----------------------------------------------------------------


def cmd_cat(args: argparse.Namespace, out: TextIO) -> None:
    """Print records as JSON lines; first check that every segment they come from is whole (unless told not to)."""
    from spark_kafka_backup.catalog.seals import seal_problems
    from spark_kafka_backup.catalog.segment_set import damaged_segments
    from spark_kafka_backup.errors import DamagedBackupError

    root = parse_location(args.dir)
    readers = []
    damage: list[str] = []
    keys = installed_keys()
    for topic in _topics(root, args.topic):
        topic_dir = root / topic
        for partition in _partitions(topic_dir, args.partition):
            reader = PartitionReader(topic_dir, partition, legacy=args.legacy_no_magic)
            if keys.keys:  # what the key does not vouch for is never printed, whatever --no-verify says
                unsealed = seal_problems(root, topic, partition, reader, keys, unrecorded_ok=args.allow_unauthenticated)
                if unsealed:
                    raise DamagedBackupError(f"nothing was printed: {'; '.join(unsealed)}")
            skipped: frozenset[str] = frozenset()
            if args.verify:
                found = damaged_segments(
                    root, topic, partition, reader, from_offset=args.from_offset, to_offset=args.to_offset
                )
                damage += [bad.describe(topic, partition) for bad in found]
                skipped = frozenset(bad.name for bad in found)
            readers.append((topic, partition, reader, skipped))
    if damage and not args.skip_bad_segments:
        raise DamagedBackupError(
            f"the backup is damaged: {'; '.join(damage)} "
            "(--skip-bad-segments prints the rest, --no-verify prints what the files hold)"
        )
    for line in damage:
        print(f"spark-kafka-backup cat: warning: left out: {shown(line)}", file=sys.stderr)
    for topic, partition, reader, skipped in readers:
        for record in reader.records(args.from_offset, args.to_offset, skip_segments=skipped):
            out.write(json.dumps(record_to_json(topic, partition, record), separators=(",", ":")))
            out.write("\n")


def cmd_ls(args: argparse.Namespace, out: TextIO) -> None:
    root = parse_location(args.dir)
    listing: list[dict[str, Any]] = []
    for topic in _topics(root, args.topic):
        topic_dir = root / topic
        partitions: list[dict[str, Any]] = []
        for partition in _partitions(topic_dir, args.partition):
            reader = PartitionReader(topic_dir, partition, legacy=args.legacy_no_magic)
            segments = reader.summaries()
            lost = read_gaps(root, topic, partition)
            (missing, missing_ranges), (skipped, skipped_ranges) = missing_offsets(
                reader, legacy=args.legacy_no_magic, lost_at_source=lost, catalog=read_catalog(root, topic, partition)
            )
            firsts = [s.first_offset for s in segments if s.first_offset is not None]
            lasts = [s.last_offset for s in segments if s.last_offset is not None]
            partitions.append(
                {
                    "partition": partition,
                    "records": sum(s.record_count for s in segments),
                    "firstOffset": min(firsts) if firsts else None,
                    "lastOffset": max(lasts) if lasts else None,
                    "bytes": sum(s.records_bytes for s in segments),
                    "missingOffsets": missing,
                    "missingRanges": [asdict(r) for r in missing_ranges],
                    "transactionOffsets": skipped,
                    "transactionRanges": [asdict(r) for r in skipped_ranges],
                    "lostAtSourceOffsets": sum(g.count for g in lost),
                    "lostAtSource": [{"first": g.first, "last": g.last, "how": g.how} for g in lost],
                    "segments": [
                        {
                            "name": s.name,
                            "startOffset": s.start_offset,
                            "records": s.record_count,
                            "firstOffset": s.first_offset,
                            "lastOffset": s.last_offset,
                            "recordsBytes": s.records_bytes,
                            "indexBytes": s.index_bytes,
                            "compression": s.compression,
                        }
                        for s in segments
                    ],
                }
            )
        listing.append({"topic": topic, "compacted": is_compacted(root, topic), "partitions": partitions})
    if args.json:
        json.dump(listing, out, indent=2)
        out.write("\n")
        return
    for topic_entry in listing:
        out.write(f"{topic_entry['topic']}\n")
        for p in topic_entry["partitions"]:
            span = "empty" if p["records"] == 0 else f"offsets {p['firstOffset']}..{p['lastOffset']}"
            gaps = [
                describe_missing(p["missingOffsets"], [OffsetRange(**r) for r in p["missingRanges"]]),
                describe_skipped(p["transactionOffsets"], [OffsetRange(**r) for r in p["transactionRanges"]],
                                 compacted=topic_entry["compacted"]),
            ]  # fmt: skip
            for text in gaps:
                span += f", {text}" if text else ""
            lost_text = describe_gaps([SourceGap(topic_entry["topic"], p["partition"], g["first"], g["last"])
                                       for g in p["lostAtSource"]])  # fmt: skip
            if lost_text:
                span += f", {lost_text}"
            out.write(
                f"  partition {p['partition']}: {count(p['records'], 'record')}, {span}, "
                f"{count(p['bytes'], 'byte')} in {count(len(p['segments']), 'segment')}\n"
            )
            for s in p["segments"]:
                span = "empty" if s["records"] == 0 else f"offsets {s['firstOffset']}..{s['lastOffset']}"
                stored = f" ({s['compression']})" if s["compression"] else ""
                out.write(
                    f"    {s['name']}: {count(s['records'], 'record')}, {span}, "
                    f"{count(s['recordsBytes'], 'byte')}{stored}\n"
                )


def cmd_index_show(args: argparse.Namespace, out: TextIO) -> None:
    path = parse_location(args.file)
    if not exists(path):
        raise BackupNotFoundError(f"{path}: file does not exist")
    if parse_partition_index_file_name(path.name) is not None or args.kind == "partition":
        entries, _ = decode_partition_index(
            read_limited(path, MAX_PARTITION_INDEX_SIZE), file=str(path), legacy=args.legacy_no_magic
        )
        out.write("start_offset\tsegment\n")
        for entry in entries:
            out.write(f"{entry.start_offset}\t{entry.name}\n")
        return
    if not path.name.endswith(INDEX_SUFFIX) and args.kind != "segment":
        raise UsageError(f"{path.name}: not an index file name; say --kind segment or --kind partition")
    with SegmentIndexFile(path, legacy=args.legacy_no_magic) as index:
        out.write("offset\tposition\tlength\n")
        for offset, position, length in index.iter_entries():
            out.write(f"{offset}\t{position}\t{length}\n")


def cmd_index_rebuild(args: argparse.Namespace, out: TextIO) -> None:
    location = parse_location(args.topic_dir)
    if not isinstance(location, Path):
        raise UsageError(f"{location}: index rebuild works on a local directory (copy the topic down first)")
    topic_dir = location
    if not topic_dir.is_dir():
        raise BackupNotFoundError(f"{topic_dir}: topic directory does not exist")
    problems = 0
    partitions = _partitions(topic_dir, args.partition)
    with Progress("index rebuild", len(partitions), "partitions") as shown:
        for partition in partitions:
            if not args.partition_index_only:
                for files in list_segment_files(topic_dir, partition):
                    if not as_local(files.records).exists():
                        out.write(f"skipped {files.index.name}: its records file is missing\n")
                        problems += 1
                        continue
                    result = rebuild_segment_index(
                        as_local(files.records), as_local(files.index), legacy=args.legacy_no_magic
                    )
                    out.write(f"rebuilt {files.index.name}: {count(result.record_count, 'record')}\n")
                    if result.bad_tail_position is not None:
                        problems += 1
                        position, reason = result.bad_tail_position, result.bad_tail_reason
                        out.write(f"  warning: bytes from {position} on are not indexed: {reason}\n")
            entries = rebuild_partition_index(topic_dir, partition)
            out.write(f"rebuilt index_partition_{partition:03d}: {count(len(entries), 'segment')}\n")
            shown.advance(note=f"{topic_dir.name}/{partition}")
    if problems:
        raise KbackupError(f"index rebuild finished with {problems} problem(s); see above")


def cmd_offsets(args: argparse.Namespace, out: TextIO) -> None:
    root = parse_location(args.dir)
    result: dict[str, dict[str, dict[str, int]]] = {}
    for topic in _topics(root, args.topic):
        for partition in _partitions(root / topic, args.partition):
            offsets = read_consumer_offsets(root / topic, partition)
            if offsets:
                result.setdefault(topic, {})[str(partition)] = offsets
    if not result:
        where = f"topic {args.topic!r}" if args.topic else "this backup"
        if args.partition is not None:
            where += f" partition {args.partition}"
        print(f"spark-kafka-backup: no consumer group offsets are stored for {where} in {root}", file=sys.stderr)
    if args.json:
        json.dump(result, out, indent=2, sort_keys=True)
        out.write("\n")
        return
    for topic, by_partition in result.items():
        for partition_key, groups in by_partition.items():
            for group, offset in sorted(groups.items()):
                out.write(f"{shown(topic)}\t{partition_key}\t{shown(group)}\t{offset}\n")


def cmd_verify(args: argparse.Namespace, out: TextIO) -> None:
    from spark_kafka_backup.catalog.verify import verify_backup

    root = parse_location(args.dir)
    reports = verify_backup(root, _topics(root, args.topic), deep=args.deep, legacy=args.legacy_no_magic, progress=True,
                            keys=installed_keys(), unrecorded_ok=args.allow_unauthenticated)  # fmt: skip
    if not reports:
        out.write(f"{root}: no partitions backed up yet: nothing to verify\n")
    damaged = 0
    for report in reports:
        state = "ok" if report.ok else "DAMAGED"
        out.write(
            f"{report.topic}/{report.partition}: {state} "
            f"({count(report.segments, 'segment')}, {count(report.records, 'record')})\n"
        )
        for error in report.errors:
            out.write(f"  error: {error}\n")
        for note in report.notes:
            out.write(f"  note: {note}\n")
        damaged += not report.ok
    registry_damage = _verify_registry_copy(root, out)
    if damaged:
        raise KbackupError(f"{damaged} of {count(len(reports), 'partition')} failed verification")
    if registry_damage:
        raise KbackupError(f"the backup's copy of its schema registry failed verification: {registry_damage}")


def _verify_registry_copy(root: Location, out: TextIO) -> str | None:
    """The schema registry copy's line of ``verify`` (nothing when the backup has none); the damage found, if any."""
    from spark_kafka_backup.errors import FormatError
    from spark_kafka_backup.schema_registry.capture import read_registry_copy

    try:
        copy = read_registry_copy(root)
    except FormatError as exc:
        out.write(f"schema registry copy: DAMAGED\n  error: {shown(str(exc))}\n")
        return str(exc)
    if copy is not None:
        out.write(f"schema registry copy: ok ({shown(copy.describe())} of {shown(copy.registry)})\n")
    return None


def cmd_describe(args: argparse.Namespace, out: TextIO) -> None:
    from spark_kafka_backup.report.summary import summarize_backup

    root = parse_location(args.dir)
    summary = summarize_backup(root, _topics(root, args.topic), legacy=args.legacy_no_magic)
    if args.json:
        json.dump(summary.to_json(), out, indent=2)
        out.write("\n")
        return
    out.write(f"backup {summary.root}: {count(len(summary.topics), 'topic')}\n")
    for topic in summary.topics:
        out.write(f"{topic.topic}: {count(topic.records, 'record')}, {count(topic.bytes, 'byte')}\n")
        for p in topic.partitions:
            span = "empty" if p.first_offset is None else f"offsets {p.first_offset}..{p.last_offset}"
            missing = ", ".join(text for text in (describe_missing(p.missing, p.missing_ranges),
                                                  describe_gaps(p.lost_at_source),
                                                  describe_skipped(p.skipped, p.skipped_ranges,
                                                                   compacted=topic.compacted)) if text)  # fmt: skip
            missing = f", {missing}" if missing else ""
            out.write(
                f"  partition {p.partition}: {count(p.records, 'record')}, {span}{missing}, {count(p.bytes, 'byte')}\n"
            )
            for group, offset in sorted(p.groups.items()):
                out.write(f"    group {shown(group)}: {offset}\n")
    for checkpoint in summary.checkpoints:
        out.write(f"checkpoint {checkpoint.id}: {checkpoint.status}\n")


def cmd_report(args: argparse.Namespace, out: TextIO) -> None:
    from spark_kafka_backup.report.html import render_report
    from spark_kafka_backup.report.summary import summarize_backup

    root = parse_location(args.dir)
    summary = summarize_backup(root, _topics(root, args.topic), legacy=args.legacy_no_magic)
    page = render_report(summary, generated_at=int(time.time() * 1000))
    target = Path(args.output)
    target.write_text(page, encoding="utf-8")
    out.write(f"wrote {target} ({count(len(summary.topics), 'topic')})\n")


def cmd_catalog_rebuild(args: argparse.Namespace, out: TextIO) -> None:
    from spark_kafka_backup.catalog.build import rebuild_catalog

    root = parse_location(args.dir)
    keys = installed_keys().keys
    for catalog in rebuild_catalog(root, _topics(root, args.topic), legacy=args.legacy_no_magic, progress=True):
        records = sum(entry.records for entry in catalog.segments)
        out.write(
            f"{catalog.topic}/{catalog.partition}: {count(len(catalog.segments), 'finished segment')}, "
            f"{count(records, 'record')}\n"
        )
        if keys:  # the operator vouches for the partition as it is now, with the key of its newest sealed segment
            from spark_kafka_backup.catalog.seals import vouch_as_found

            newest = next((bytes.fromhex(e.key_id) for e in reversed(catalog.segments) if e.key_id), None)
            kek = keys.get(newest) if newest is not None else None
            record = vouch_as_found(root, root / catalog.topic, catalog.partition, kek or next(iter(keys.values())))
            plain = ", ".join(name for name, _ in record.plain)
            out.write(f"  seal record written: sealed through offset {record.sealed_through}; "
                      f"{count(len(record.plain), 'plain segment')} vouched for as found{': ' if plain else ''}"
                      f"{plain}\n")  # fmt: skip


def cmd_checkpoint_create(args: argparse.Namespace, out: TextIO) -> None:
    from spark_kafka_backup.catalog.checkpoints import request, serving_backup

    root = parse_location(args.dir)
    running = serving_backup(root)
    if running is None:
        raise KbackupError(
            f"{root}: no continuous backup is running on this target, and only a running one takes a checkpoint's "
            "cut (the consumer groups and end offsets, once it has backed up to them); start one and ask again "
            "(a snapshot backup records a completed checkpoint of its own when it finishes)"
        )
    created = request(root)
    out.write(f"checkpoint {created.id} requested; the running {running.describe()} takes its cut within a second\n")


def cmd_checkpoint_list(args: argparse.Namespace, out: TextIO) -> None:
    from spark_kafka_backup.catalog.checkpoints import list_checkpoints

    for checkpoint in list_checkpoints(parse_location(args.dir)):
        when = checkpoint.taken_at or checkpoint.requested_at
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when / 1000))
        reason = f" ({shown(checkpoint.reason)})" if checkpoint.reason else ""
        out.write(
            f"{checkpoint.id}\t{stamp}\t{checkpoint.status}{reason}\t{count(len(checkpoint.ends), 'partition')}\n"
        )


def cmd_checkpoint_describe(args: argparse.Namespace, out: TextIO) -> None:
    from spark_kafka_backup.catalog.checkpoints import read_checkpoint

    out.write(read_checkpoint(parse_location(args.dir), args.id).encode().decode())


def cmd_schemas_list(args: argparse.Namespace, out: TextIO) -> None:
    from spark_kafka_backup.schema_registry.capture import read_registry_copy, registry_copy_path

    root = parse_location(args.dir)
    _topics(root, None)  # a path that is no backup is named as such
    copy = read_registry_copy(root)
    if copy is None:
        out.write(f"{root}: no schema registry is backed up ({registry_copy_path(root)} is missing)\n")
        return
    if args.json:
        out.write(copy.encode().decode())
        return
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(copy.captured_at / 1000))
    out.write(
        f"registry {shown(copy.registry)}, last changed by the capture at {stamp}; compatibility "
        f"{shown(copy.compatibility or 'unknown')}, mode {shown(copy.mode or 'unknown')}; "
        f"{count(len(copy.schemas), 'schema')}\n"
    )
    for subject in copy.subjects.values():
        if args.subject is not None and subject.name != args.subject:
            continue
        level = f" (compatibility {shown(subject.compatibility)})" if subject.compatibility else ""
        versions = ", ".join(f"{v.version}: id {v.id}" + (" deleted" if v.deleted else "") for v in subject.versions)
        out.write(f"{shown(subject.name)}{level}: {versions}\n")


def cmd_schemas_capture(args: argparse.Namespace, out: TextIO) -> None:
    from spark_kafka_backup.job_options import schema_registry_address
    from spark_kafka_backup.schema_registry.capture import capture_into, registry_copy_path

    root = parse_location(args.dir)
    _topics(root, None)
    address = schema_registry_address(args)
    if address is None:
        raise UsageError("say which registry: --schema-registry URL")
    copy, changed = capture_into(root, address)
    what = "written to" if changed else "unchanged in"
    out.write(f"{copy.describe()} of {address.shown}: {what} {registry_copy_path(root)}\n")


def cmd_prune(args: argparse.Namespace, out: TextIO) -> None:
    from spark_kafka_backup.catalog.prune import plan_prune, prune, prune_lease

    root = parse_location(args.dir)
    if args.older_than is None and args.keep_checkpoints is None:
        raise UsageError("say what to prune: --older-than DURATION and/or --keep-checkpoints N")
    cutoff = None if args.older_than is None else int(time.time() * 1000) - args.older_than
    if args.dry_run:
        doomed, dropped = plan_prune(
            root, _topics(root, args.topic), cutoff_ms=cutoff, keep_checkpoints=args.keep_checkpoints
        )
        _list_pruned(out, "would delete", doomed, dropped)
        freed = sum(item.entry.records_bytes + item.entry.index_bytes for item in doomed)
        out.write(f"{count(len(doomed), 'segment')}, {count(freed, 'byte')} would be freed\n")
        return
    topics = _topics(root, args.topic)
    with prune_lease(root):
        _finish_interrupted(root, out)
        doomed, dropped = plan_prune(root, topics, cutoff_ms=cutoff, keep_checkpoints=args.keep_checkpoints)
        _list_pruned(out, "deleting", doomed, dropped)
        out.flush()
        prune(root, doomed, dropped, progress=True)
    freed = sum(item.entry.records_bytes + item.entry.index_bytes for item in doomed)
    out.write(
        f"deleted {count(len(doomed), 'segment')} and {count(len(dropped), 'checkpoint')}: "
        f"{count(freed, 'byte')} freed\n"
    )


def cmd_merge(args: argparse.Namespace, out: TextIO) -> None:
    from spark_kafka_backup.catalog.merge import merge, plan_merge
    from spark_kafka_backup.catalog.prune import prune_lease

    root = parse_location(args.dir)
    topics = _topics(root, args.topic)
    for topic in topics:
        for partition in list_partitions(root / topic):
            if read_catalog(root, topic, partition) is None:
                out.write(
                    f"{topic}/{partition}: no catalog, not merged (spark-kafka-backup catalog rebuild {root} writes "
                    "it)\n"
                )
    if args.dry_run:
        groups = plan_merge(root, topics, max_segment_size=args.max_segment_size)
        _list_merged(out, "would merge", groups)
        replaced = sum(len(group.sources) for group in groups)
        out.write(f"{count(replaced, 'segment')} would be merged into {count(len(groups), 'segment')}\n")
        return
    with prune_lease(root):
        _finish_interrupted(root, out)
        _refuse_unsealed(root, {(topic, partition) for topic in topics for partition in list_partitions(root / topic)},
                         args)  # fmt: skip
        groups = plan_merge(root, topics, max_segment_size=args.max_segment_size)
        _list_merged(out, "merging", groups)
        out.flush()
        merge(root, groups, progress=True)
    replaced = sum(len(group.sources) for group in groups)
    out.write(f"merged {count(replaced, 'segment')} into {count(len(groups), 'segment')}\n")


def _refuse_unsealed(root: Location, partitions: set[tuple[str, int]], args: argparse.Namespace) -> None:
    """With a key given, merge nothing of a partition the key does not vouch for (it would be sealed anew)."""
    from spark_kafka_backup.catalog.seals import seal_problems
    from spark_kafka_backup.errors import DamagedBackupError

    keys = installed_keys()
    if not keys.keys:
        return
    unsealed: list[str] = []
    for topic, partition in sorted(partitions):
        reader = PartitionReader(root / topic, partition)
        unsealed += seal_problems(root, topic, partition, reader, keys, unrecorded_ok=args.allow_unauthenticated)
    if unsealed:
        raise DamagedBackupError(f"nothing was merged: {'; '.join(unsealed)}")


def _finish_interrupted(root: Location, out: TextIO) -> None:
    """Prune and merge finish each other's interrupted work before planning their own (they share the lease)."""
    from spark_kafka_backup.catalog import merge, prune

    if prune.finish_intent(root, progress=True):
        out.write("finished an interrupted prune\n")
    if merge.finish_intent(root):
        out.write("finished an interrupted merge\n")


def _list_merged(out: TextIO, verb: str, groups: list[Any]) -> None:
    for group in groups:
        first, last = group.sources[0], group.sources[-1]
        out.write(
            f"{verb} {group.topic}/{group.partition} {first.name}..{last.name}: {len(group.sources)} segments, "
            f"{group.records} records, {group.plain_bytes} plain bytes into {group.merged}\n"
        )


def _list_pruned(out: TextIO, verb: str, doomed: list[Any], dropped: list[Any]) -> None:
    for item in doomed:
        entry = item.entry
        out.write(
            f"{verb} {item.topic}/{item.partition} {entry.name}: offsets {entry.first_offset}..{entry.last_offset}, "
            f"{entry.records} records, {entry.records_bytes + entry.index_bytes} bytes\n"
        )
    for checkpoint in dropped:
        out.write(f"{verb} checkpoint {checkpoint.id}\n")


def _duration_ms(text: str) -> int:
    import re

    match = re.fullmatch(r"(\d+)\s*(ms|s|m|h|d|w)", text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"expected a duration like 7d, 12h, 30m, 90s, not {text!r}")
    unit = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}[match[2]]
    return int(match[1]) * unit


# -- parser ----------------------------------------------------------------------


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from exc
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected a number > 0, got 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spark-kafka-backup",
        description="Back up and restore Kafka topics with Spark; inspect and repair kafka-backup v1 backups.",
    )
    parser.add_argument("--version", action="version", version=f"spark-kafka-backup {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="on an error, print where it came from too (the traceback and its causes)"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Listed for --help; main() hands them to spark_kafka_backup.launcher before this parser sees their arguments.
    sub.add_parser("backup", help="run the backup job on Spark (spark-kafka-backup backup --help)", add_help=False)
    sub.add_parser("restore", help="run the restore job on Spark (spark-kafka-backup restore --help)", add_help=False)

    legacy = argparse.ArgumentParser(add_help=False)
    legacy.add_argument(
        "--legacy-no-magic",
        action="store_true",
        help="read files written before the v1 magic byte existed (mid 2019)",
    )
    add_encryption_flags(
        legacy.add_argument_group("encrypted segments"), purpose="encrypted segments were sealed with", several=True
    )
    select = argparse.ArgumentParser(add_help=False)
    select.add_argument("dir", metavar="DIR", help="backup root (one directory per topic)")
    select.add_argument("--topic", help="only this topic")
    select.add_argument("--partition", type=_non_negative, help="only this partition")

    cat = sub.add_parser("cat", parents=[select, legacy], help="print records as JSON lines")
    cat.add_argument("--from-offset", type=_non_negative, help="first offset to print")
    cat.add_argument("--to-offset", type=_non_negative, help="last offset to print (inclusive)")
    cat.add_argument(
        "--no-verify",
        dest="verify",
        action="store_false",
        help="do not check segments against the catalog and the partition index first",
    )
    cat.add_argument(
        "--skip-bad-segments", action="store_true", help="leave out damaged or lost segments (named on stderr)"
    )
    cat.set_defaults(func=cmd_cat, command_parser=cat)

    ls = sub.add_parser("ls", parents=[select, legacy], help="list topics, partitions, segments and offset ranges")
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=cmd_ls)

    offsets = sub.add_parser("offsets", parents=[select], help="show stored consumer group offsets")
    offsets.add_argument("--json", action="store_true", help="print JSON")
    offsets.set_defaults(func=cmd_offsets)

    verify = sub.add_parser("verify", parents=[legacy], help="check files, indexes and the catalog; exit 1 on damage")
    verify.add_argument("dir", metavar="DIR", help="backup root (one directory per topic)")
    verify.add_argument("--topic", help="only this topic")
    verify.add_argument("--deep", action="store_true", help="also decode every record against its index")
    verify.set_defaults(func=cmd_verify)

    describe_backup = sub.add_parser(
        "describe", parents=[legacy], help="what a backup holds: coverage, gaps, groups, checkpoints"
    )
    describe_backup.add_argument("dir", metavar="DIR", help="backup root")
    describe_backup.add_argument("--topic", help="only this topic")
    describe_backup.add_argument("--json", action="store_true", help="print JSON")
    describe_backup.set_defaults(func=cmd_describe)

    report = sub.add_parser("report", parents=[legacy], help="write a self-contained HTML page about a backup")
    report.add_argument("dir", metavar="DIR", help="backup root")
    report.add_argument("--topic", help="only this topic")
    report.add_argument(
        "-o", "--output", default="backup-report.html", metavar="FILE", help="default: backup-report.html"
    )
    report.set_defaults(func=cmd_report)

    catalog = sub.add_parser("catalog", help="the catalog of what a backup holds")
    catalog_sub = catalog.add_subparsers(dest="catalog_command", required=True, metavar="ACTION")
    rebuild_catalog = catalog_sub.add_parser(
        "rebuild", parents=[legacy], help="describe every finished segment anew (also for backups by the original)"
    )
    rebuild_catalog.add_argument("dir", metavar="DIR", help="backup root")
    rebuild_catalog.add_argument("--topic", help="only this topic")
    rebuild_catalog.set_defaults(func=cmd_catalog_rebuild)

    prune = sub.add_parser("prune", help="delete old segments no retained checkpoint needs")
    prune.add_argument("dir", metavar="DIR", help="backup root")
    prune.add_argument("--topic", help="only this topic")
    prune.add_argument("--older-than", type=_duration_ms, metavar="DURATION", help="e.g. 30d: segments older than this")
    prune.add_argument(
        "--keep-checkpoints", type=_non_negative, metavar="N", help="retain only the newest N checkpoints"
    )
    prune.add_argument("--dry-run", action="store_true", help="list what would go; delete nothing")
    prune.set_defaults(func=cmd_prune)

    merging = sub.add_parser("merge", help="merge small finished segments into segments of the configured size")
    merging.add_argument("dir", metavar="DIR", help="backup root")
    merging.add_argument("--topic", help="only this topic")
    merging.add_argument(
        "--max-segment-size", type=_positive, default=DEFAULT_MAX_SEGMENT_SIZE, metavar="BYTES",
        help=f"merged segments hold up to this many plain bytes (default {DEFAULT_MAX_SEGMENT_SIZE})",
    )  # fmt: skip
    merging.add_argument("--dry-run", action="store_true", help="list what would be merged; change nothing")
    add_encryption_flags(
        merging.add_argument_group("encrypted segments"), purpose="encrypted segments were sealed with", several=True
    )
    merging.set_defaults(func=cmd_merge)

    checkpoint = sub.add_parser("checkpoint", help="consistent cuts of a backup: create, list, describe")
    checkpoint_sub = checkpoint.add_subparsers(dest="checkpoint_command", required=True, metavar="ACTION")
    create = checkpoint_sub.add_parser("create", help="ask the running continuous backup for a checkpoint")
    create.add_argument("dir", metavar="DIR", help="backup root")
    create.set_defaults(func=cmd_checkpoint_create)
    listing = checkpoint_sub.add_parser("list", help="id, time, status of every checkpoint")
    listing.add_argument("dir", metavar="DIR", help="backup root")
    listing.set_defaults(func=cmd_checkpoint_list)
    describe = checkpoint_sub.add_parser("describe", help="one checkpoint with its cut, as JSON")
    describe.add_argument("dir", metavar="DIR", help="backup root")
    describe.add_argument("id", type=_non_negative, metavar="ID")
    describe.set_defaults(func=cmd_checkpoint_describe)

    schemas = sub.add_parser("schemas", help="the backup's copy of its schema registry: list, capture")
    schemas_sub = schemas.add_subparsers(dest="schemas_command", required=True, metavar="ACTION")
    listed = schemas_sub.add_parser("list", help="subjects, versions and ids the backup holds")
    listed.add_argument("dir", metavar="DIR", help="backup root")
    listed.add_argument("--subject", help="only this subject")
    listed.add_argument("--json", action="store_true", help="the whole copy as JSON (formats/schema-registry.md)")
    listed.set_defaults(func=cmd_schemas_list)
    capture = schemas_sub.add_parser("capture", help="capture a schema registry into the backup now")
    capture.add_argument("dir", metavar="DIR", help="backup root")
    add_schema_registry_flags(capture, purpose="to capture")
    capture.set_defaults(func=cmd_schemas_capture)
    index = sub.add_parser("index", help="list or rebuild segment and partition indexes")
    index_sub = index.add_subparsers(dest="index_command", required=True, metavar="ACTION")
    show = index_sub.add_parser("show", parents=[legacy], help="list the entries of an index file")
    show.add_argument("file", metavar="FILE", help="a segment index (*_index) or partition index (index_partition_*)")
    show.add_argument("--kind", choices=["segment", "partition"], help="the file's kind when its name does not say")
    show.set_defaults(func=cmd_index_show)
    rebuild = index_sub.add_parser(
        "rebuild", parents=[legacy], help="rebuild segment indexes and partition indexes from the records files"
    )
    rebuild.add_argument("topic_dir", metavar="TOPIC_DIR", help="a topic directory of a backup")
    rebuild.add_argument("--partition", type=_non_negative, help="only this partition")
    rebuild.add_argument(
        "--partition-index-only", action="store_true", help="rebuild only the partition index, not the segment indexes"
    )
    rebuild.set_defaults(func=cmd_index_rebuild)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] in ("backup", "restore"):
        from spark_kafka_backup.launcher import main as launch

        return launch(arguments[0], arguments[1:])
    parser = build_parser()
    args = parser.parse_args(arguments)
    restrict_new_files(None)  # what prune, rebuild and checkpoint create write: nothing for others
    low, high = getattr(args, "from_offset", None), getattr(args, "to_offset", None)
    if low is not None and high is not None and low > high:
        args.command_parser.error(f"--from-offset {low} is after --to-offset {high} (both inclusive): nothing to print")

    def run() -> int:
        try:
            if getattr(args, "encryption_key_file", None) or getattr(args, "encryption_key_env", None):
                install_keys(KeyRing.of(source.key for source in encryption_key_sources(args)))
            args.func(args, _safe_output(args))
            sys.stdout.flush()
        except BrokenPipeError:
            # The reader went away (``spark-kafka-backup cat ... | head``): not an error.
            sys.stderr.close()
        return 0

    return exit_code("spark-kafka-backup", run, say=_say_error, debug=args.debug)


def _say_error(line: str) -> None:
    print(shown(line), file=sys.stderr)


def _safe_output(args: argparse.Namespace) -> TextIO:
    """Standard output through the escape its kind needs (:mod:`spark_kafka_backup.text`): JSON keeps its own
    escapes."""
    json_output = getattr(args, "json", False) or args.func in (cmd_cat, cmd_checkpoint_describe)
    return cast(TextIO, TerminalText(sys.stdout, shown_json if json_output else shown_text))


if __name__ == "__main__":
    sys.exit(main())
