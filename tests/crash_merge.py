"""Child process for the killed-merge test: ``spark-kafka-backup merge ROOT --max-segment-size SIZE``, SIGKILLed at a
file operation.

Usage: python -m tests.crash_merge ROOT SIZE KILL_AT

The process kills itself at its KILL_AT-th call of write, fsync, replace or unlink (a dying write first writes half
of its bytes, as a torn write would).
"""

from __future__ import annotations

import sys

from tests.crash_child import arm_kill


def main() -> None:
    from spark_kafka_backup.cli import main as run_cli

    root, size, kill_at = sys.argv[1:4]
    arm_kill(int(kill_at), ("write", "fsync", "replace", "unlink"))
    sys.exit(run_cli(["merge", root, "--max-segment-size", size]))


if __name__ == "__main__":
    main()
