"""Finding processes a test run left behind, by the marker every child inherits."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

#: Command-line fragments of the long-lived processes tests start.
_SERVERS = (
    "kafka.Kafka",
    "SparkSubmit",
    "deploy.master",
    "deploy.worker",
    "moto_server",
    "moto.server",
    "fake-gcs-server",
    "azurite",
    "pyspark.daemon",
    "pyspark.worker",
    "CoarseGrainedExecutorBackend",
)


def marked_processes(marker: str) -> list[tuple[int, str]]:
    """(pid, "server (command line...)") of server processes whose environment holds ``KBACKUP_TEST_RUN=marker``."""
    needle = f"KBACKUP_TEST_RUN={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        servers = [server for server in _SERVERS if server in command]
        if servers and needle in environ.split(b"\0"):
            found.append((int(entry.name), f"{servers[0]} ({command[:120]}...)"))
    return found


def kill_leftovers(marker: str, *, grace: float = 10.0) -> list[tuple[int, str]]:
    """Wait up to ``grace`` seconds for marked servers to end; kill and return those that did not."""
    deadline = time.monotonic() + grace
    left = marked_processes(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = marked_processes(marker)
    for pid, _ in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return left
