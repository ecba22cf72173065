"""Progress of long operations: a bar redrawn in place on a terminal, plain lines otherwise.

Written to standard error, so a command's real output (a verify report,
JSON) stays clean on standard output. On a terminal the bar is redrawn at
most ten times a second; elsewhere (a log file, CI, a pipe) one line is
written per step, at most one a second, and always for the last step::

    verify [##########..........] 5/10 partitions  orders/4        (terminal)
    verify: 5/10 partitions (orders/4)                             (log)
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

BAR_WIDTH = 20


class Progress:
    """Counts ``done`` out of ``total`` steps of one operation (``label``, counting ``unit``).

    ``enabled=False`` counts silently (library callers that did not ask for progress).
    """

    def __init__(
        self,
        label: str,
        total: int,
        unit: str,
        *,
        stream: TextIO | None = None,
        terminal: bool | None = None,
        min_interval: float | None = None,
        enabled: bool = True,
    ) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        self._terminal = self._stream.isatty() if terminal is None else terminal
        self._interval = min_interval if min_interval is not None else (0.1 if self._terminal else 1.0)
        self._last_shown = float("-inf")
        self._drawn = False
        self._enabled = enabled

    def advance(self, steps: int = 1, note: str = "") -> None:
        self.done += steps
        if not self._enabled:
            return
        now = time.monotonic()
        if self.done < self.total and now - self._last_shown < self._interval:
            return
        self._last_shown = now
        if self._terminal:
            filled = BAR_WIDTH * self.done // self.total if self.total else BAR_WIDTH
            bar = "#" * filled + "." * (BAR_WIDTH - filled)
            self._write(f"\r\x1b[2K{self.label} [{bar}] {self.done}/{self.total} {self.unit}  {note}")
            self._drawn = True
        else:
            suffix = f" ({note})" if note else ""
            self._write(f"{self.label}: {self.done}/{self.total} {self.unit}{suffix}\n")

    def close(self) -> None:
        """End the bar's line (a terminal) so later output starts on a new one."""
        if self._terminal and self._drawn:
            self._write("\n")
            self._drawn = False

    def _write(self, text: str) -> None:
        """Progress is for the eye: a stream that fails (a reader gone, a terminal hung up) ends it, never the
        operation it shows."""
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):
            self._enabled = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
