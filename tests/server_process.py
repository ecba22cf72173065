"""A test server run as a process of its own: started in its own process group, waited for until it answers over
HTTP, stopped with its whole group afterwards (tests/s3_server.py, tests/gcs_server.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path


@contextmanager
def serving(
    command: list[str], log_path: Path, ready_url: str, what: str, *, timeout: float = 60, any_answer: bool = False
) -> Iterator[None]:
    """Run ``command`` (its output into ``log_path``) until the block ends; ready once ``ready_url`` answers (with
    ``any_answer``, an HTTP error status counts: a server that refuses an unsigned request listens)."""
    log = open(log_path, "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(ready_url, timeout=2):
                    break
            except urllib.error.HTTPError:
                if any_answer:
                    break
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{what} did not start ({ready_url}); see {log_path}") from None
                time.sleep(0.2)
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{what} did not start ({ready_url}); see {log_path}") from None
                time.sleep(0.2)
        yield
    finally:
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()
