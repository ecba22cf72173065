"""The ``spark-kafka-backup`` command: look inside v1 backups and repair their indexes.

Every user mistake or damaged file ends as one line on stderr and exit code 1
(argument errors: argparse's usage message and exit code 2).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO, cast

from spark_kafka_backup.arguments import encryption_key_sources
from spark_kafka_backup.boundary import exit_code
from spark_kafka_backup.cli.checkpoints import cmd_checkpoint_describe
from spark_kafka_backup.cli.look import cmd_cat
from spark_kafka_backup.cli.parser import build_parser
from spark_kafka_backup.cli.records import record_to_json
from spark_kafka_backup.format.encryption import KeyRing
from spark_kafka_backup.fsutil import restrict_new_files
from spark_kafka_backup.partition.records_file import NO_KEYS
from spark_kafka_backup.text import TerminalText, shown, shown_json, shown_text


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["--debug"] and arguments[1:2] in (["backup"], ["restore"]):
        arguments = [arguments[1], "--debug", *arguments[2:]]  # the job's own --debug
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
            # The command's keys, handed by the command to each reader and writer that needs them.
            args.keys = (
                KeyRing.of(source.key for source in encryption_key_sources(args))
                if getattr(args, "encryption_key_file", None) or getattr(args, "encryption_key_env", None)
                else NO_KEYS
            )
            args.func(args, _safe_output(args))
            sys.stdout.flush()
        except BrokenPipeError:
            # The reader went away (``spark-kafka-backup cat ... | head``): not an error.
            sys.stderr.close()
        return 0

    interrupted = "interrupted (a merge, prune or rebuild finishes what it began when run again)"
    return exit_code("spark-kafka-backup", run, say=_say_error, debug=args.debug, interrupted=interrupted)


def _say_error(line: str) -> None:
    print(shown(line), file=sys.stderr)


def _safe_output(args: argparse.Namespace) -> TextIO:
    """Standard output through the escape its kind needs (:mod:`spark_kafka_backup.text`): JSON keeps its own
    escapes."""
    json_output = getattr(args, "json", False) or args.func in (cmd_cat, cmd_checkpoint_describe)
    return cast(TextIO, TerminalText(sys.stdout, shown_json if json_output else shown_text))


__all__ = ["build_parser", "main", "record_to_json"]
