"""``spark-kafka-backup erase``: records taken out of a backup for good (:mod:`spark_kafka_backup.catalog.erase`).

The records are chosen by key (``--key`` text, ``--key-hex`` bytes: compared on the columns, no Spark) or by a Spark
SQL predicate (``--where``, over the columns of the ``kbackup`` data source, evaluated by a local Spark session as
``restore --where`` evaluates it). Before anything is chosen, every segment of the partitions is checked against the
catalog: a damaged one could hold records to erase, so nothing is erased while one is.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import TextIO

from spark_kafka_backup.catalog.build import file_size
from spark_kafka_backup.catalog.erase import (
    PartitionErase,
    erase_partition,
    key_matches,
    plan_partition,
    purge_partition,
    refuse_unfinished_erase,
)
from spark_kafka_backup.catalog.erasures import read_erased
from spark_kafka_backup.catalog.integrity import bad_segments, damage_text
from spark_kafka_backup.catalog.prune import prune_lease
from spark_kafka_backup.cli.records import chosen_topics
from spark_kafka_backup.cli.repair import finish_interrupted, refuse_unsealed
from spark_kafka_backup.errors import DamagedBackupError, RetainedError, UsageError
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.format.naming import RECORDS_SUFFIX, parse_segment_file_name
from spark_kafka_backup.partition.erased import ErasedOffsets
from spark_kafka_backup.partition.layout import list_partitions, list_segment_files, list_topics, state_dir
from spark_kafka_backup.partition.reader import PartitionReader
from spark_kafka_backup.storage import Location, parse_location
from spark_kafka_backup.storage.lease import TargetLease
from spark_kafka_backup.storage.removals import Removals
from spark_kafka_backup.storage.retention import KeptVersion, describe, release_text, unseen_note
from spark_kafka_backup.text import count


def cmd_erase(args: argparse.Namespace, out: TextIO) -> None:
    if args.finish and args.dry_run:
        raise UsageError("--finish changes the backup (it completes an interrupted erase): not with --dry-run")
    root = parse_location(args.dir)
    removals = Removals(bypass_governance=args.bypass_governance_retention)
    others = Removals()  # what an interrupted prune or merge finished here leaves: said, not held against the erase
    if args.finish:
        _finish(root, out, args.keys, removals, others)
        return
    if args.topic is None:
        raise UsageError("say which topic to erase from: --topic T")
    topic = chosen_topics(root, args.topic)[0]
    partitions = list_partitions(root / topic)
    if args.partition is not None:
        if args.partition not in partitions:
            raise UsageError(f"topic {topic!r} of {root} has no partition {args.partition} (it has {partitions})")
        partitions = [args.partition]
    key = _chosen_key(args)
    with ExitStack() as held:
        if not args.dry_run:
            held.enter_context(TargetLease(state_dir(root), "erase"))  # no backup writes meanwhile
            if isinstance(root, Path):
                held.enter_context(prune_lease(root))  # nor a prune or a merge (the same lease on an object store)
            finish_interrupted(root, out, args.keys, others, erase_removals=removals)
        else:
            refuse_unfinished_erase(root, [topic])  # a dry run finishes nothing: it would plan on a half-done erase
        refuse_unsealed(root, {(topic, partition) for partition in partitions}, args, verb="erased")
        _refuse_damaged(root, topic, partitions, args.keys)
        chosen = _chosen(root, topic, partitions, key, args)
        plans = [
            plan
            for p in partitions
            if (plan := plan_partition(root, topic, p, chosen.get(p, ErasedOffsets()), args.keys))
        ]
        verb = "would erase" if args.dry_run else "erasing"
        for plan in plans:
            out.write(_describe(verb, plan) + "\n")
        out.flush()
        total = sum(plan.records for plan in plans)
        if args.dry_run:
            out.write(f"{count(total, 'record')} would be erased from {count(len(plans), 'partition')}\n")
            return
        for plan in plans:
            erase_partition(root, plan, args.keys, removals)
        for partition in partitions:  # again: what an earlier erase left to a lock that has run out since
            if read_erased(root, topic, partition):  # never erased from: its history is the bucket's
                purge_partition(root / topic, partition, removals)
    out.write(f"erased {count(total, 'record')} from {count(len(plans), 'partition')} of {topic}\n")
    _report_followers(out, root, plans)
    note = unseen_note(root)
    if note is not None:  # the deleted segments held the erased records
        out.write(note + "\n")
    for line in describe(others.kept):
        out.write(line + "\n")
    _refuse_kept(out, removals, root)


def _finish(root: Location, out: TextIO, keys: KeyRing, removals: Removals, others: Removals) -> None:
    """``--finish``: complete interrupted work on the target (the topic may be gone since)."""
    with TargetLease(state_dir(root), "erase"), prune_lease(root) if isinstance(root, Path) else ExitStack():
        if not finish_interrupted(root, out, keys, others, erase_removals=removals):
            out.write("no erase, merge or prune was interrupted: nothing to finish\n")
        for topic in list_topics(root):  # an erase killed after its intent went: what the bucket still keeps
            for partition in list_partitions(root / topic):
                if read_erased(root, topic, partition):
                    purge_partition(root / topic, partition, removals)
    for line in describe(others.kept):
        out.write(line + "\n")
    _refuse_kept(out, removals, root)


def _may_hold_erased(root: Location, version: KeptVersion) -> bool:
    """Whether a kept version may hold erased records: a segment's records file that starts at or before the last
    offset erased from its partition (a name this cannot read: yes)."""
    topic, _, name = version.location.rpartition("/")
    parsed = parse_segment_file_name(name)
    if parsed is None:
        return True
    if parsed.kind != "records":
        return False  # an index holds offsets and positions, no record
    erased = read_erased(root, topic.rpartition("/")[2], parsed.partition)
    return bool(erased) and parsed.start_offset <= int(erased.lasts[-1])


def _refuse_kept(out: TextIO, removals: Removals, root: Location) -> None:
    """Say what the bucket keeps; an erase is not done while a lock keeps versions that may hold erased records."""
    for line in describe(removals.kept):
        out.write(line + "\n")
    locked = [version for version in removals.locked if _may_hold_erased(root, version)]
    if locked:
        when = release_text(locked)
        raise RetainedError(
            f"the erased records are out of the backup, but a lock keeps {count(len(locked), 'version')} of its "
            f"deleted segments that may still hold them: run the same erase again {when} to delete them "
            "(docs/operations.md, 'Versioned and locked buckets')"
        )


def _chosen_key(args: argparse.Namespace) -> bytes | None:
    if args.key is not None:
        return str(args.key).encode()
    if args.key_hex is not None:
        try:
            return bytes.fromhex(args.key_hex)
        except ValueError as exc:
            raise UsageError(f"--key-hex {args.key_hex!r}: not hexadecimal bytes (e.g. 6b6579)") from exc
    return None


def _refuse_damaged(root: Location, topic: str, partitions: list[int], keys: KeyRing) -> None:
    """Nothing is erased while a segment of the partitions fails its checks, or holds records the partition index does
    not name (a publish killed before its index, a lost entry): either could hold records to erase."""
    damaged = [
        f"{topic}/{p} {bad.name}: {bad.reason}" for p in partitions for bad in bad_segments(root, topic, p, keys=keys)
    ]
    for partition in partitions:
        named = {segment.name for segment in PartitionReader(root / topic, partition).segments}
        for files in list_segment_files(root / topic, partition):
            name = files.records.name[: -len(RECORDS_SUFFIX)]
            if name not in named and max(file_size(files.records) or 0, file_size(files.index) or 0) > 1:
                damaged.append(f"{topic}/{partition} {name}: holds records the partition index does not name")
    if damaged:
        raise DamagedBackupError(
            f"nothing was erased: a damaged segment could hold records to erase: {damage_text(damaged)} "
            f"(spark-kafka-backup verify {root} says more)"
        )


def _chosen(
    root: Location, topic: str, partitions: list[int], key: bytes | None, args: argparse.Namespace
) -> dict[int, ErasedOffsets]:
    """Per partition, offset ranges covering exactly the stored records to erase."""
    if key is not None:
        return {p: key_matches(PartitionReader(root / topic, p, keys=args.keys), key) for p in partitions}
    return _where_matches(root, topic, partitions, args)


def _where_matches(
    root: Location, topic: str, partitions: list[int], args: argparse.Namespace
) -> dict[int, ErasedOffsets]:
    from pyspark.sql import SparkSession

    from spark_kafka_backup.arguments import encryption_key_sources
    from spark_kafka_backup.restore.matching import MatchScope, find_matches
    from spark_kafka_backup.spark.session import job_session

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers import this package too
    sources = tuple(source.where() for source in encryption_key_sources(args))
    scope = MatchScope(root, args.where, sources, allow_unauthenticated=args.allow_unauthenticated)
    # A session of its own, stopped after; one that was already running (erase called from a program that has one) is
    # used and left running. No web UI: its SQL tab would show the predicate (what is erased) on a port.
    running = SparkSession.getActiveSession()
    spark = job_session("kbackup-erase-where", debug=bool(getattr(args, "debug", False)),
                        spark_conf={"spark.ui.enabled": "false"}, umask=0o077)  # fmt: skip
    try:
        matched = find_matches(scope, spark, [topic], use="an erase", narrow="--partition, a stricter predicate")
    finally:
        if running is None:
            spark.stop()
    return {
        partition: ErasedOffsets.of(zip(runs.firsts.tolist(), runs.lasts.tolist(), strict=True))
        for (_, partition), runs in matched.items()
        if partition in partitions
    }


def _describe(verb: str, plan: PartitionErase) -> str:
    ranges = plan.erased.ranges()
    shown = ", ".join(str(first) if first == last else f"{first}..{last}" for first, last in ranges[:3])
    more = f" and {len(ranges) - 3} more ranges" if len(ranges) > 3 else ""
    return (
        f"{verb} {plan.topic}/{plan.partition}: {count(plan.records, 'record')} at offsets {shown}{more}, "
        f"rewriting {count(len(plan.replacements), 'segment')}"
    )


def _report_followers(out: TextIO, root: Location, plans: list[PartitionErase]) -> None:
    """One line per standby follower (:mod:`spark_kafka_backup.catalog.holds`, live or not) that restored erased
    records before the erase: the erase cannot take them out of its standby. Records it had not restored never reach
    it: its next pass reads the backup as erased."""
    from spark_kafka_backup.catalog.holds import read_holds
    from spark_kafka_backup.errors import FormatError

    try:
        holds = read_holds(root)
    except FormatError as exc:  # the erase is done: what cannot be told about followers is said, not an error
        out.write(f"cannot tell whether a standby follower had restored erased records: {exc}\n")
        return
    for hold in holds:
        for plan in plans:
            restored = hold.next.get((plan.topic, plan.partition), 0)
            below = [(int(first), min(int(last), restored - 1)) for first, last in zip(plan.erased.firsts,
                     plan.erased.lasts, strict=True) if first < restored]  # fmt: skip
            if below:
                out.write(
                    f"{hold.describe()} had restored erased records of {plan.topic}/{plan.partition} (offsets "
                    f"{below[0][0]}..{below[-1][1]}) to its standby before this erase: they are still there; delete "
                    "them on the standby (or feed a new standby from the backup)\n"
                )
