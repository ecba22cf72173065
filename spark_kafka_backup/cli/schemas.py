"""``schemas list|capture``: the copy of a schema registry a backup keeps."""

from __future__ import annotations

import argparse
import time
from typing import TextIO

from spark_kafka_backup.cli.records import chosen_topics
from spark_kafka_backup.errors import UsageError
from spark_kafka_backup.storage import parse_location
from spark_kafka_backup.text import count, shown


def cmd_schemas_list(args: argparse.Namespace, out: TextIO) -> None:
    from spark_kafka_backup.schema_registry.capture import read_registry_copy, registry_copy_path

    root = parse_location(args.dir)
    chosen_topics(root, None)  # a path that is no backup is named as such
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
    from spark_kafka_backup.arguments import schema_registry_address
    from spark_kafka_backup.schema_registry.capture import (
        capture_into,
        deferred_line,
        missing_ids_line,
        registry_copy_path,
    )

    root = parse_location(args.dir)
    chosen_topics(root, None)
    address = schema_registry_address(args)
    if address is None:
        raise UsageError("say which registry: --schema-registry URL")
    captured = capture_into(root, address)
    what = "written to" if captured.changed else "unchanged in"
    out.write(f"{captured.copy.describe()} of {address.shown}: {what} {registry_copy_path(root)}\n")
    if captured.missing:
        out.write(f"{missing_ids_line(captured.missing, address.shown)}\n")
    if captured.deferred:
        out.write(f"{deferred_line(captured.deferred)}\n")
