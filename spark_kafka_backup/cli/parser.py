"""The command line of ``spark-kafka-backup``: every command, its options and their types."""

from __future__ import annotations

import argparse

from spark_kafka_backup import __version__
from spark_kafka_backup.argtypes import duration_ms, non_negative_int, positive_count
from spark_kafka_backup.arguments import add_encryption_flags, add_schema_registry_flags
from spark_kafka_backup.cli.checkpoints import cmd_checkpoint_create, cmd_checkpoint_describe, cmd_checkpoint_list
from spark_kafka_backup.cli.erase import cmd_erase
from spark_kafka_backup.cli.look import (
    cmd_cat,
    cmd_describe,
    cmd_index_show,
    cmd_ls,
    cmd_offsets,
    cmd_report,
    cmd_verify,
)
from spark_kafka_backup.cli.pack import cmd_pack
from spark_kafka_backup.cli.repair import cmd_catalog_rebuild, cmd_index_rebuild, cmd_merge, cmd_prune
from spark_kafka_backup.cli.schemas import cmd_schemas_capture, cmd_schemas_list
from spark_kafka_backup.partition.writer import DEFAULT_MAX_SEGMENT_SIZE


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
    select.add_argument("--partition", type=non_negative_int, help="only this partition")

    cat = sub.add_parser("cat", parents=[select, legacy], help="print records as JSON lines")
    cat.add_argument("--from-offset", type=non_negative_int, help="first offset to print")
    cat.add_argument("--to-offset", type=non_negative_int, help="last offset to print (inclusive)")
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
    describe_backup.add_argument(
        "--metadata",
        action="store_true",
        help="the cluster around the topics as the backup captured it, version by version: ACLs, client quotas, "
        "SCRAM users, dynamic broker configurations, topics' partitions and replication",
    )
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
    prune.add_argument("--older-than", type=duration_ms, metavar="DURATION", help="e.g. 30d: segments older than this")
    prune.add_argument(
        "--keep-checkpoints", type=non_negative_int, metavar="N", help="retain only the newest N checkpoints"
    )
    prune.add_argument("--dry-run", action="store_true", help="list what would go; delete nothing")
    prune.set_defaults(func=cmd_prune)

    merging = sub.add_parser("merge", help="merge small finished segments into segments of the configured size")
    merging.add_argument("dir", metavar="DIR", help="backup root")
    merging.add_argument("--topic", help="only this topic")
    merging.add_argument(
        "--max-segment-size", type=positive_count, default=DEFAULT_MAX_SEGMENT_SIZE, metavar="BYTES",
        help=f"merged segments hold up to this many plain bytes (default {DEFAULT_MAX_SEGMENT_SIZE})",
    )  # fmt: skip
    merging.add_argument("--dry-run", action="store_true", help="list what would be merged; change nothing")
    add_encryption_flags(
        merging.add_argument_group("encrypted segments"), purpose="encrypted segments were sealed with", several=True
    )
    merging.set_defaults(func=cmd_merge)

    erasing = sub.add_parser(
        "erase", help="take records out of a backup for good (a key's, or a predicate's), leaving recorded gaps"
    )
    erasing.add_argument("dir", metavar="DIR", help="backup root")
    erasing.add_argument("--topic", help="the topic to erase from (required but with --finish)")
    erasing.add_argument("--partition", type=non_negative_int, help="only this partition")
    chosen = erasing.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--key", metavar="TEXT", help="erase the records whose key is exactly these UTF-8 bytes")
    chosen.add_argument("--key-hex", metavar="HEX", help="erase the records whose key is exactly these bytes")
    chosen.add_argument(
        "--where", metavar="PREDICATE",
        help="erase the records this Spark SQL predicate holds for (the columns of restore --where); runs Spark",
    )  # fmt: skip
    chosen.add_argument(
        "--finish", action="store_true", help="only finish an erase that was interrupted (restore refuses until then)"
    )
    erasing.add_argument("--dry-run", action="store_true", help="say what would be erased; change nothing")
    erasing.add_argument(
        "--bypass-governance-retention", action="store_true",
        help="on an S3 bucket with Object Lock in governance mode, delete the locked versions that hold erased "
             "records too (needs s3:BypassGovernanceRetention); compliance mode cannot be bypassed",
    )  # fmt: skip
    add_encryption_flags(
        erasing.add_argument_group("encrypted segments"), purpose="encrypted segments were sealed with", several=True
    )
    erasing.set_defaults(func=cmd_erase)

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
    describe.add_argument("id", type=non_negative_int, metavar="ID")
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
    packing = sub.add_parser(
        "pack",
        help="write the packed environment a cluster's executors run (backup/restore --archive)",
        description="Write spark-kafka-backup and every package its executors import (but PySpark, which the "
        "cluster's Spark carries) from this installation into one .tar.gz, for backup/restore --archive on a "
        "cluster whose executors have only Spark and a Python of this version.",
    )
    packing.add_argument(
        "--output", "-o", default="kbackup-env.tar.gz", metavar="FILE", help="the archive (default %(default)s)"
    )
    packing.add_argument(
        "--without-native",
        dest="native",
        action="store_false",
        help="leave out the compiled Kafka edge and records scanner: the executors use confluent-kafka's client "
        "and numpy (slower, the same results), e.g. for executors of another CPU or C library",
    )
    packing.set_defaults(func=cmd_pack)
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
    rebuild.add_argument("--partition", type=non_negative_int, help="only this partition")
    rebuild.add_argument(
        "--partition-index-only", action="store_true", help="rebuild only the partition index, not the segment indexes"
    )
    rebuild.set_defaults(func=cmd_index_rebuild)
    _debug_everywhere(parser)
    return parser


def _debug_everywhere(parser: argparse.ArgumentParser) -> None:
    """``--debug`` after a command too (``spark-kafka-backup ls DIR --debug``), as the jobs take it."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, command in action.choices.items():
                if name not in ("backup", "restore"):  # the launcher's: the jobs have their own --debug
                    command.add_argument(
                        "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
                    )
                    _debug_everywhere(command)
