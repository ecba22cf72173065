"""Where a slow task is: its Python stack printed to the executor's stderr while it runs too long.

Opt-in by the environment of the executors' Python workers:
``KBACKUP_DUMP_STACKS_AFTER=SECONDS`` (on a cluster, pass it as
``spark.executorEnv.KBACKUP_DUMP_STACKS_AFTER``). A task that runs longer
prints the stacks of its Python worker's threads, and again every SECONDS
until it ends. For a task that seems stuck (a producer waiting for a broker,
a read that makes no progress); nothing is printed for tasks that end in time.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
from collections.abc import Iterator

ENVIRONMENT_VARIABLE = "KBACKUP_DUMP_STACKS_AFTER"


@contextlib.contextmanager
def stacks_if_slow() -> Iterator[None]:
    """Around one task's work in a Python worker (one task at a time: faulthandler has one timer per process)."""
    try:
        seconds = float(os.environ.get(ENVIRONMENT_VARIABLE, "0") or 0)
    except ValueError:
        seconds = 0.0
    if seconds <= 0:
        yield
        return
    faulthandler.dump_traceback_later(seconds, repeat=True, file=sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
