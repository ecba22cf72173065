"""The commands that look inside a backup: ``cat``, ``ls``, ``index show``, ``offsets``, ``verify``, ``describe``,
``report``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from spark_kafka_backup.catalog.erasures import describe_erasure, read_erasure
from spark_kafka_backup.catalog.source_gaps import SourceGap, describe_gaps, read_gaps
from spark_kafka_backup.catalog.store import LOST_CATALOG_NOTE, catalog_lost, read_catalog
from spark_kafka_backup.cli.records import chosen_partitions, chosen_topics, record_to_json
from spark_kafka_backup.errors import BackupNotFoundError, SparkKafkaBackupError, UsageError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.naming import INDEX_SUFFIX, parse_partition_index_file_name
from spark_kafka_backup.format.partition_index import decode_partition_index
from spark_kafka_backup.partition.offsets_file import read_consumer_offsets
from spark_kafka_backup.partition.reader import MAX_PARTITION_INDEX_SIZE, PartitionReader
from spark_kafka_backup.partition.segment_reader import SegmentIndexFile
from spark_kafka_backup.report.summary import (
    OffsetRange,
    describe_missing,
    describe_skipped,
    explained_gaps,
    is_compacted,
    missing_offsets,
)
from spark_kafka_backup.storage import Location, exists, parse_location, read_limited
from spark_kafka_backup.text import count, iso_time, shown


def cmd_cat(args: argparse.Namespace, out: TextIO) -> None:
    """Print records as JSON lines; first check that every segment they come from is whole (unless told not to)."""
    from spark_kafka_backup.catalog.integrity import damage_text
    from spark_kafka_backup.catalog.seals import seal_problems
    from spark_kafka_backup.catalog.segment_set import damaged_segments
    from spark_kafka_backup.errors import DamagedBackupError

    root = parse_location(args.dir)
    readers = []
    damage: list[str] = []
    keys: KeyRing = args.keys
    for topic in chosen_topics(root, args.topic):
        topic_dir = root / topic
        for partition in chosen_partitions(topic_dir, args.partition):
            reader = PartitionReader(topic_dir, partition, legacy=args.legacy_no_magic, keys=keys)
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
            f"the backup is damaged: {damage_text(damage)} "
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
    for topic in chosen_topics(root, args.topic):
        topic_dir = root / topic
        partitions: list[dict[str, Any]] = []
        for partition in chosen_partitions(topic_dir, args.partition):
            reader = PartitionReader(topic_dir, partition, legacy=args.legacy_no_magic)
            segments = reader.summaries()
            lost = read_gaps(root, topic, partition)
            erased, erased_records = read_erasure(root, topic, partition)
            catalog = read_catalog(root, topic, partition)
            (missing, missing_ranges), (skipped, skipped_ranges) = missing_offsets(
                reader,
                legacy=args.legacy_no_magic,
                lost_at_source=explained_gaps(lost, erased, topic, partition),
                catalog=catalog,
            )
            lost_catalog = catalog_lost(root, topic, partition, catalog=catalog, has_segments=bool(segments))
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
                    "erasedRecords": erased_records,
                    "catalogLost": lost_catalog,
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
            if p["erasedRecords"]:
                span += f", {describe_erasure(p['erasedRecords'])}"
            if p["catalogLost"]:
                span += f", {LOST_CATALOG_NOTE}"
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


def cmd_offsets(args: argparse.Namespace, out: TextIO) -> None:
    root = parse_location(args.dir)
    result: dict[str, dict[str, dict[str, int]]] = {}
    for topic in chosen_topics(root, args.topic):
        for partition in chosen_partitions(root / topic, args.partition):
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
    reports = verify_backup(root, chosen_topics(root, args.topic), deep=args.deep, legacy=args.legacy_no_magic,
                            progress=True, keys=args.keys, unrecorded_ok=args.allow_unauthenticated)  # fmt: skip
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
        raise SparkKafkaBackupError(f"{damaged} of {count(len(reports), 'partition')} failed verification")
    if registry_damage:
        raise SparkKafkaBackupError(f"the backup's copy of its schema registry failed verification: {registry_damage}")


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
    if args.metadata:
        _describe_metadata(root, out, as_json=args.json)
        return
    summary = summarize_backup(root, chosen_topics(root, args.topic), legacy=args.legacy_no_magic, keys=args.keys)
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
                                                  describe_erasure(p.erased_records),
                                                  describe_skipped(p.skipped, p.skipped_ranges,
                                                                   compacted=topic.compacted),
                                                  LOST_CATALOG_NOTE if p.catalog_lost else "") if text)  # fmt: skip
            missing = f", {missing}" if missing else ""
            out.write(
                f"  partition {p.partition}: {count(p.records, 'record')}, {span}{missing}, {count(p.bytes, 'byte')}\n"
            )
            for group, offset in sorted(p.groups.items()):
                out.write(f"    group {shown(group)}: {offset}\n")
    for checkpoint in summary.checkpoints:
        out.write(f"checkpoint {checkpoint.id}: {checkpoint.status}\n")


def _describe_metadata(root: Location, out: TextIO, *, as_json: bool) -> None:
    """``describe --metadata``: each kept version of the cluster metadata, the first whole, the others as changes."""
    from spark_kafka_backup.catalog.cluster_metadata import NotCaptured, changes, read_version, version_times

    if not exists(root):
        raise BackupNotFoundError(f"{root}: no such backup")
    versions = [read_version(root, at) for at in version_times(root)]
    if as_json:
        json.dump({"versions": [version.document() for version in versions]}, out, indent=2)
        out.write("\n")
        return
    if not versions:
        out.write(f"backup {root}: no cluster metadata captured (a backup by an earlier version, or the original)\n")
        return
    out.write(f"backup {root}: cluster metadata, {count(len(versions), 'version')}\n")
    previous = None
    for version in versions:
        out.write(f"{iso_time(version.captured_at)} cluster {shown(version.cluster_id)}: {version.summary()}\n")
        for what, section in (
            ("ACLs", version.acls),
            ("client quotas", version.quotas),
            ("SCRAM users", version.scram_users),
            ("broker configurations", version.broker_configs),
        ):
            if isinstance(section, NotCaptured):
                out.write(f"  {what} not captured: {shown(section.describe())}\n")
        for line in changes(previous, version):
            if line.startswith(("+ ", "- ")):  # a section not captured is said above
                out.write(f"  {shown(line)}\n")
        previous = version


def cmd_report(args: argparse.Namespace, out: TextIO) -> None:
    from spark_kafka_backup.report.html import render_report
    from spark_kafka_backup.report.summary import summarize_backup

    root = parse_location(args.dir)
    summary = summarize_backup(root, chosen_topics(root, args.topic), legacy=args.legacy_no_magic, keys=args.keys)
    page = render_report(summary, generated_at=int(time.time() * 1000))
    target = Path(args.output)
    target.write_text(page, encoding="utf-8")
    out.write(f"wrote {target} ({count(len(summary.topics), 'topic')})\n")
