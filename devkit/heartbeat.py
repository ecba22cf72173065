"""A line at least every so often while something slow and quiet runs: ``./dev setup``'s install, ``./dev demo``'s
steps (a fresh machine spends minutes in each, and silence reads as a hang).

As a command (standard library only: ``./dev`` runs it before the virtual environment exists)::

    python3 devkit/heartbeat.py --every 20 --what "installing into .venv" -- COMMAND [ARG ...]

runs COMMAND, passes its standard output and standard error through line by line as they come, and whenever
nothing was written for ``--every`` seconds writes ``  ... still WHAT (N s)`` to standard error. It exits with
COMMAND's exit code (127 when it cannot be started).
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TextIO

#: Seconds of silence before a heartbeat line: under the 30 s a newcomer waits before wondering.
EVERY = 20.0


class Heartbeat:
    """While open, writes ``  ... still WHAT (N s)`` to ``stream`` whenever nothing was said for ``every`` seconds;
    :meth:`said` tells it something was (it counts from there)."""

    def __init__(self, what: str, *, every: float = EVERY, stream: TextIO | None = None) -> None:
        self.what = what
        self.every = every
        self._stream = stream
        self._began = time.monotonic()
        self._last = self._began
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    def said(self) -> None:
        with self._lock:
            self._last = time.monotonic()

    def _beat(self) -> None:
        while not self._done.wait(min(1.0, self.every / 4)):
            now = time.monotonic()
            with self._lock:
                if now - self._last < self.every:
                    continue
                self._last = now
            stream = self._stream or sys.stderr
            stream.write(f"  ... still {self.what} ({now - self._began:.0f} s)\n")
            stream.flush()

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._done.set()
        self._thread.join()


class Relayed:
    """What :func:`run_relayed` saw: the exit code and every line of each stream."""

    def __init__(self, returncode: int, stdout: list[str], stderr: list[str]) -> None:
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


def run_relayed(
    command: Sequence[str],
    what: str,
    *,
    every: float = EVERY,
    shown: Callable[[str], bool] = lambda line: True,
) -> Relayed:
    """Run ``command``, write each line of its standard output and error that ``shown`` keeps as it comes (to this
    process's standard output and error), with a heartbeat for ``what`` while it is quiet; every line is kept for
    the caller (a failure's tail)."""
    stdout: list[str] = []
    stderr: list[str] = []
    with Heartbeat(what, every=every) as heartbeat:
        # Undecodable bytes replaced, and a reader of ours gone (| head) never stops the draining: a pipe left full
        # would stop the command, and this wait with it.
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace", bufsize=1
        )

        def relay(source: TextIO | None, kept: list[str], into: TextIO) -> None:
            assert source is not None
            for line in source:
                kept.append(line)
                if shown(line):
                    with contextlib.suppress(OSError, ValueError):
                        into.write(line)
                        into.flush()
                    heartbeat.said()

        readers = [
            threading.Thread(target=relay, args=(process.stdout, stdout, sys.stdout), daemon=True),
            threading.Thread(target=relay, args=(process.stderr, stderr, sys.stderr), daemon=True),
        ]
        for reader in readers:
            reader.start()
        returncode = process.wait()
        for reader in readers:
            reader.join(10)  # a child of the command that keeps its output open is not waited for
    return Relayed(returncode, stdout, stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=float, default=EVERY, help="seconds of silence before a line (default 20)")
    parser.add_argument("--what", required=True, help="what is running, as the line says it: still WHAT")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("a command to run is needed after --")
    try:
        return run_relayed(command, args.what, every=args.every).returncode
    except OSError as exc:
        print(f"heartbeat: cannot run {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127
    except KeyboardInterrupt:  # Ctrl-C reached the command too (one process group): it says its own
        return 130


if __name__ == "__main__":
    sys.exit(main())
