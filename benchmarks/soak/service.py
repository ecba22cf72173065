"""The backup as an operator runs it: a service that is started again when it exits on its own (as systemd's
``Restart=on-failure`` would), and stopped as docs/operations.md says (SIGTERM to the Python driver whose pid the job
logged). Every unasked exit is noted with the end of the log before it: the soak reports it as a finding, and the
comparison at the end shows whether the restart lost or doubled anything.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

_DRIVER_PID = re.compile(rb"stop with SIGTERM to the driver process (\d+)")


@dataclass
class Exit:
    at_s: float
    code: int
    last_lines: list[str] = field(default_factory=list)


class BackupService(threading.Thread):
    def __init__(self, start: Callable[[], subprocess.Popen[bytes]], log_file: Path,
                 on_restart: Callable[[int], None], *, name: str = "the backup") -> None:  # fmt: skip
        super().__init__(daemon=True, name="soak-backup-service")
        self._start, self.log_file, self._on_restart, self.name = start, log_file, on_restart, name
        self.process = start()
        self.exits: list[Exit] = []
        #: Exits are noted in seconds from this (monotonic) time: the soak sets its own start.
        self.began = time.monotonic()
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        while not self._halt.wait(2):
            with self._lock:
                if self._halt.is_set() or self.process.poll() is None:
                    continue
                tail = self.log_file.read_bytes()[-6000:].decode(errors="replace").splitlines()[-40:]
                self.exits.append(Exit(round(time.monotonic() - self.began, 1), self.process.returncode, tail))
                print(f"soak: {self.name} exited with {self.process.returncode}; started again", flush=True)
                time.sleep(5)  # systemd's RestartSec
                self.process = self._start()
                self._on_restart(self.process.pid)

    def stop(self, timeout: float) -> int:
        """SIGTERM to the driver; the job's exit code."""
        with self._lock:
            self._halt.set()
            found = _DRIVER_PID.findall(self.log_file.read_bytes())
            if not found:
                raise RuntimeError(f"{self.name} did not log its driver's pid: see {self.log_file}")
            with contextlib.suppress(ProcessLookupError):  # it had exited: its code says how
                os.kill(int(found[-1]), signal.SIGTERM)
            return self.process.wait(timeout)
