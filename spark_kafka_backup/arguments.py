"""Option groups the jobs and the ``spark-kafka-backup`` commands share: the encryption key and schema registry
options and what they name (the argparse types they share are :mod:`spark_kafka_backup.argtypes`').
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from spark_kafka_backup.errors import UsageError
from spark_kafka_backup.schema_registry.client import RegistryAddress


@dataclass(frozen=True)
class EncryptionKeySource:
    """Where a key-encryption key is read: a file or an environment variable (never the key itself on a command
    line, in a Spark option or in a task). ``key`` is read once on the driver to check it."""

    file: str | None
    env: str | None
    key: bytes = field(repr=False)

    def where(self) -> tuple[str | None, str | None]:
        """What travels to executors: the file's path or the variable's name."""
        return self.file, self.env


def add_encryption_flags(group: argparse._ArgumentGroup, *, purpose: str, several: bool = False) -> None:
    """``--encryption-key-file`` and ``--encryption-key-env`` (docs/backup.md, Encrypted segments); ``several``:
    repeatable (a reader of a backup written under more than one key)."""
    more = " (repeatable)" if several else ""
    action = "append" if several else "store"
    group.add_argument(
        "--encryption-key-file",
        action=action,
        metavar="FILE",
        help=f"a 256-bit key-encryption key (32 raw bytes, 64 hex digits or base64) that {purpose}{more}",
    )
    group.add_argument("--encryption-key-env", action=action, metavar="VAR",
                       help=f"the same from this environment variable{more}")  # fmt: skip
    if several:
        group.add_argument(
            "--allow-unauthenticated",
            action="store_true",
            help="with a key given, also read partitions that have no seal record (written before seal records, "
            "or not with a key); every other check of what the key vouches for still holds",
        )


def encryption_key_sources(args: argparse.Namespace) -> list[EncryptionKeySource]:
    """The keys the flags name, each read and checked."""
    from spark_kafka_backup.partition.records_file import load_key

    def listed(value: object) -> list[str]:
        return [] if value is None else [str(v) for v in value] if isinstance(value, list) else [str(value)]

    found = [
        EncryptionKeySource(str(Path(file).resolve()), None, load_key(file=Path(file).resolve()))
        for file in listed(args.encryption_key_file)
    ]
    found += [EncryptionKeySource(None, env, load_key(env=env)) for env in listed(args.encryption_key_env)]
    return found


def encryption_key_source(args: argparse.Namespace) -> EncryptionKeySource | None:
    """The one key a writer seals with (``None`` without the flags)."""
    found = encryption_key_sources(args)
    if len(found) > 1:
        raise UsageError("give --encryption-key-file or --encryption-key-env, not both")
    return found[0] if found else None


def add_schema_registry_flags(group: argparse._ActionsContainer, *, purpose: str) -> None:
    """``--schema-registry`` and its login flags (docs/schema-registry.md)."""
    group.add_argument(
        "--schema-registry",
        metavar="URL",
        help=f"a Confluent-compatible schema registry (Confluent, Karapace, ...) {purpose}",
    )
    group.add_argument(
        "--schema-registry-user-info-env",
        metavar="VAR",
        help="environment variable holding the registry's USER:PASSWORD (basic authentication)",
    )
    group.add_argument("--schema-registry-ca-file", metavar="FILE",
                       help="CA certificates (PEM) to check an https registry with")  # fmt: skip


def schema_registry_address(args: argparse.Namespace) -> RegistryAddress | None:
    """The registry the flags name (``None`` without ``--schema-registry``)."""
    if args.schema_registry is None:
        if args.schema_registry_user_info_env or args.schema_registry_ca_file:
            raise UsageError("--schema-registry-user-info-env and --schema-registry-ca-file need --schema-registry")
        return None
    return RegistryAddress.parse(
        args.schema_registry, user_info_env=args.schema_registry_user_info_env, ca_file=args.schema_registry_ca_file
    )
