"""The commands that change a backup: ``index rebuild``, ``catalog rebuild``, ``prune``, ``merge`` (and the steps
``erase`` shares with them)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, TextIO

from spark_kafka_backup.catalog.store import read_catalog
from spark_kafka_backup.cli.records import chosen_partitions, chosen_topics
from spark_kafka_backup.errors import BackupNotFoundError, SparkKafkaBackupError, UsageError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.partition.layout import list_partitions, list_segment_files
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.partition.rebuild import rebuild_partition_index, rebuild_segment_index
from spark_kafka_backup.progress import Progress
from spark_kafka_backup.storage import Location, as_local, parse_location
from spark_kafka_backup.storage.removals import Removals
from spark_kafka_backup.storage.retention import describe, unseen_note
from spark_kafka_backup.text import count, iso_time


def cmd_index_rebuild(args: argparse.Namespace, out: TextIO) -> None:
    location = parse_location(args.topic_dir)
    if not isinstance(location, Path):
        raise UsageError(f"{location}: index rebuild works on a local directory (copy the topic down first)")
    topic_dir = location
    if not topic_dir.is_dir():
        raise BackupNotFoundError(f"{topic_dir}: topic directory does not exist")
    problems = 0
    partitions = chosen_partitions(topic_dir, args.partition)
    with Progress("index rebuild", len(partitions), "partitions") as shown:
        for partition in partitions:
            if not args.partition_index_only:
                for files in list_segment_files(topic_dir, partition):
                    if not as_local(files.records).exists():
                        out.write(f"skipped {files.index.name}: its records file is missing\n")
                        problems += 1
                        continue
                    result = rebuild_segment_index(
                        as_local(files.records), as_local(files.index), legacy=args.legacy_no_magic, keys=args.keys
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
        raise SparkKafkaBackupError(f"index rebuild finished with {problems} problem(s); see above")


def cmd_catalog_rebuild(args: argparse.Namespace, out: TextIO) -> None:
    from spark_kafka_backup.catalog.build import rebuild_catalog

    root = parse_location(args.dir)
    keys = args.keys.keys
    rebuilt = rebuild_catalog(root, chosen_topics(root, args.topic), legacy=args.legacy_no_magic, progress=True,
                              keys=args.keys)  # fmt: skip
    for catalog in rebuilt:
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


def cmd_prune(args: argparse.Namespace, out: TextIO) -> None:
    from spark_kafka_backup.catalog.prune import plan_prune, prune, prune_lease

    root = parse_location(args.dir)
    if args.older_than is None and args.keep_checkpoints is None:
        raise UsageError("say what to prune: --older-than DURATION and/or --keep-checkpoints N")
    cutoff = None if args.older_than is None else int(time.time() * 1000) - args.older_than
    if args.dry_run:
        holds = _report_holds(out, root)
        doomed, dropped = plan_prune(
            root, chosen_topics(root, args.topic), cutoff_ms=cutoff, keep_checkpoints=args.keep_checkpoints,
            holds=holds,
        )  # fmt: skip
        _list_pruned(out, "would delete", doomed, dropped)
        freed = sum(item.entry.records_bytes + item.entry.index_bytes for item in doomed)
        gone = "would be freed" if isinstance(root, Path) else "would be deleted from the backup"  # a bucket may keep
        out.write(f"{count(len(doomed), 'segment')}, {count(freed, 'byte')} {gone}\n")
        return
    topics = chosen_topics(root, args.topic)
    removals = Removals()
    with prune_lease(root):
        finish_interrupted(root, out, args.keys, removals)
        holds = _report_holds(out, root)
        doomed, dropped = plan_prune(
            root, topics, cutoff_ms=cutoff, keep_checkpoints=args.keep_checkpoints, holds=holds
        )
        _list_pruned(out, "deleting", doomed, dropped)
        out.flush()
        prune(root, doomed, dropped, progress=True, removals=removals)
    freed = sum(item.entry.records_bytes + item.entry.index_bytes for item in doomed)
    what = f"{count(len(doomed), 'segment')} and {count(len(dropped), 'checkpoint')}"
    if removals.kept:  # a versioned or locked bucket: out of the backup, but nothing freed
        out.write(f"removed {what} from the backup\n")
    elif unseen_note(root) is not None:
        out.write(f"deleted {what}: {count(freed, 'byte')} out of the backup\n")
    else:
        out.write(f"deleted {what}: {count(freed, 'byte')} freed\n")
    _report_kept(out, removals, root)


def cmd_merge(args: argparse.Namespace, out: TextIO) -> None:
    from spark_kafka_backup.catalog.merge import merge, plan_merge
    from spark_kafka_backup.catalog.prune import prune_lease

    root = parse_location(args.dir)
    topics = chosen_topics(root, args.topic)
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
    removals = Removals()
    with prune_lease(root):
        finish_interrupted(root, out, args.keys, removals)
        refuse_unsealed(root, {(topic, partition) for topic in topics for partition in list_partitions(root / topic)},
                        args)  # fmt: skip
        groups = plan_merge(root, topics, max_segment_size=args.max_segment_size)
        _list_merged(out, "merging", groups)
        out.flush()
        merge(root, groups, progress=True, keys=args.keys, removals=removals)
    replaced = sum(len(group.sources) for group in groups)
    out.write(f"merged {count(replaced, 'segment')} into {count(len(groups), 'segment')}\n")
    _report_kept(out, removals, root)


def _report_kept(out: TextIO, removals: Removals, root: Location) -> None:
    """What a versioned or locked bucket kept of the deleted files (nothing on a disk): never said to be freed."""
    for line in describe(removals.kept):
        out.write(line + "\n")
    note = unseen_note(root)
    if note is not None:
        out.write(note + "\n")


def refuse_unsealed(
    root: Location, partitions: set[tuple[str, int]], args: argparse.Namespace, *, verb: str = "merged"
) -> None:
    """With a key given, rewrite nothing of a partition the key does not vouch for (it would be sealed anew)."""
    from spark_kafka_backup.catalog.seals import seal_problems
    from spark_kafka_backup.errors import DamagedBackupError

    keys: KeyRing = args.keys
    if not keys.keys:
        return
    unsealed: list[str] = []
    for topic, partition in sorted(partitions):
        reader = PartitionReader(root / topic, partition, keys=keys)
        unsealed += seal_problems(root, topic, partition, reader, keys, unrecorded_ok=args.allow_unauthenticated)
    if unsealed:
        raise DamagedBackupError(f"nothing was {verb}: {'; '.join(unsealed)}")


def finish_interrupted(
    root: Location,
    out: TextIO,
    keys: KeyRing,
    removals: Removals | None = None,
    *,
    erase_removals: Removals | None = None,
) -> bool:
    """Prune, merge and erase finish each other's interrupted work before planning their own (they share the
    lease), with the command's ``keys``; ``removals`` gathers what a versioned bucket keeps of what a prune or merge
    deleted; ``erase_removals`` (the erase command's) what it keeps of an erase's, whose earlier versions are then
    deleted too (without it they are left to the next erase). Whether there was any."""
    from spark_kafka_backup.catalog import erase, merge, prune

    said = []
    if prune.finish_intent(root, progress=True, removals=removals):
        said.append("finished an interrupted prune")
    if merge.finish_intent(root, keys, removals):
        said.append("finished an interrupted merge")
    finished = erase.finish_erase(root, keys, erase_removals)
    if finished == "forwards" and erase_removals is None and not isinstance(root, Path):
        said.append(
            "finished an interrupted erase (on a versioned bucket the earlier versions of the segments it replaced "
            "stay until an erase runs: run that erase again)"
        )
    elif finished == "forwards":
        said.append("finished an interrupted erase")
    elif finished == "backwards":
        said.append("rolled back an interrupted erase (it had switched no segment): nothing of it was erased")
    for line in said:
        out.write(line + "\n")
    return bool(said)


def _list_merged(out: TextIO, verb: str, groups: list[Any]) -> None:
    for group in groups:
        first, last = group.sources[0], group.sources[-1]
        out.write(
            f"{verb} {group.topic}/{group.partition} {first.name}..{last.name}: {len(group.sources)} segments, "
            f"{group.records} records, {group.plain_bytes} plain bytes into {group.merged}\n"
        )


def _report_holds(out: TextIO, root: Location) -> list[Any]:
    """One line per standby follower's hold (:mod:`spark_kafka_backup.catalog.holds`): live ones keep what their
    follower has not restored; expired ones keep nothing. The live holds."""
    from spark_kafka_backup.catalog.holds import live_holds

    live, expired = live_holds(root)
    for hold in live:
        out.write(f"kept for {hold.describe()}: every record it has not restored yet\n")
    for hold in expired:
        out.write(
            f"not kept for {hold.describe()}: its hold expired at {iso_time(hold.expires_at())} (not renewed for "
            f"{hold.expires_after_s:.0f} s); a follower starting again stops if it misses records\n"
        )
    return live


def _list_pruned(out: TextIO, verb: str, doomed: list[Any], dropped: list[Any]) -> None:
    for item in doomed:
        entry = item.entry
        out.write(
            f"{verb} {item.topic}/{item.partition} {entry.name}: offsets {entry.first_offset}..{entry.last_offset}, "
            f"{entry.records} records, {entry.records_bytes + entry.index_bytes} bytes\n"
        )
    for checkpoint in dropped:
        out.write(f"{verb} checkpoint {checkpoint.id}\n")
