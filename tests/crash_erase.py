"""Child process for the killed-erase tests: ``spark-kafka-backup erase ROOT --topic t --key KEY``, SIGKILLed at a
file operation.

Usage: python -m tests.crash_erase ROOT KEY KILL_AT

The process kills itself at its KILL_AT-th call of write, fsync, replace or unlink (a dying write first writes half
of its bytes, as a torn write would).
"""

from __future__ import annotations

import sys

from tests.crash_child import arm_kill


def main() -> None:
    from spark_kafka_backup.cli import main as run_cli

    root, key, kill_at = sys.argv[1:4]
    arm_kill(int(kill_at), ("write", "fsync", "replace", "unlink"))
    sys.exit(run_cli(["erase", root, "--topic", "t", "--key", key]))


if __name__ == "__main__":
    main()
