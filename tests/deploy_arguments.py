"""The jobs' arguments written in deploy/ files, through the jobs' own parsers.

The files those arguments name (the client settings of ``--command-config``, the key of ``--encryption-key-file``)
are the secrets mounted where the job runs: here they are stand-ins that exist, so that the parsers, which read
them, take the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

#: Options naming a file the parser reads, and what its stand-in holds.
STAND_INS = {"--command-config": b"security.protocol=SSL\n", "--encryption-key-file": b"\0" * 32}


def parse_job(job: str, arguments: Sequence[str], directory: Path) -> None:
    """``arguments`` of the ``backup`` or ``restore`` job (its own, without the launcher's) through its parser."""
    from spark_kafka_backup.backup.settings import parse_backup_args
    from spark_kafka_backup.restore.settings import parse_restore_args

    local = list(arguments)
    for index, argument in enumerate(arguments[:-1]):
        if argument in STAND_INS:
            stand_in = directory / f"stand-in-{index}"
            stand_in.write_bytes(STAND_INS[argument])
            local[index + 1] = str(stand_in)
    parse = parse_backup_args if job == "backup" else parse_restore_args
    parse(local, prog=f"spark-kafka-backup {job}")
