"""``checkpoint create|list|describe``: cuts across every partition of a backup."""

from __future__ import annotations

import argparse
import time
from typing import TextIO

from spark_kafka_backup.errors import SparkKafkaBackupError
from spark_kafka_backup.storage import parse_location
from spark_kafka_backup.text import count, shown


def cmd_checkpoint_create(args: argparse.Namespace, out: TextIO) -> None:
    from spark_kafka_backup.catalog.checkpoints import request, serving_backup

    root = parse_location(args.dir)
    running = serving_backup(root)
    if running is None:
        raise SparkKafkaBackupError(
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
