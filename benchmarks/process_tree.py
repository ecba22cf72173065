"""CPU time and peak memory of a command's whole process tree (Linux).

A Spark job is many processes: the driver JVM, PySpark's daemons and the Python workers they fork, the streaming
runners. Some exit long before the job does, some are left behind by a parent that dies first, and PySpark's
daemon ignores ``SIGCHLD``, so the kernel reaps its workers without adding their CPU time to any parent's: summing
``wait4`` usage would miss most of a job's Python. :func:`measure` runs the command under this module
(``python -m benchmarks.process_tree --report FILE -- COMMAND``), which:

- puts the command in a cgroup of its own when it can (root, cgroup v1 ``cpuacct`` or v2) and reads the group's CPU
  time when every process of the tree is gone: every process counted once, whoever reaped it (``cpu_source``
  ``cgroup``);
- else samples ``/proc`` every 0.2 s and adds up the last CPU time seen of every process of the tree, or the
  ``wait4`` sum if larger (``cpu_source`` ``sampled``: a lower bound, short processes may be missed);
- makes itself the tree's *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER)``), so a process whose parent is gone is
  re-parented here and reaped here, and the command's end is the end of its whole tree.

Peak memory is the largest sum of resident set sizes over the tree, sampled every 0.2 s (a process living less than
that may be missed), and, beside it, the largest sum of proportional set sizes (``Pss``: a page shared by N
processes counts 1/N in each; PySpark forks its workers from daemons, so the resident sum counts their shared pages
many times over; the proportional sum is what the machine pays). The measuring process itself is not counted.
Processes the command leaves running after it exits are given ``--grace`` seconds, then killed.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class TreeUsage:
    """What a command's process tree used: wall seconds, CPU seconds (user + system), peak resident MiB."""

    returncode: int
    wall_seconds: float
    cpu_seconds: float
    peak_rss_mib: float
    #: Processes of the tree seen (sampled or reaped here).
    processes: int
    #: ``cgroup`` (exact) or ``sampled`` (a lower bound).
    cpu_source: str
    #: Peak of the tree's summed proportional set sizes (0 where the kernel has no ``smaps_rollup``).
    peak_pss_mib: float = 0.0

    def per_million(self, records: int) -> float:
        """CPU seconds per million records."""
        return self.cpu_seconds / records * 1e6


def measure(
    command: list[str],
    *,
    env: dict[str, str] | None = None,
    capture: bool = False,
    on_line: Callable[[str], None] | None = None,
    grace: float = 30.0,
) -> tuple[TreeUsage, str]:
    """Run ``command`` under the subreaper: its usage, and with ``capture`` its output (standard output and error,
    each line also given to ``on_line`` as it comes); without, the output is the caller's."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "usage.json"
        meter = [sys.executable, "-m", "benchmarks.process_tree", "--report", str(report), "--grace", str(grace)]
        pipe = subprocess.PIPE if capture else None
        with subprocess.Popen(
            [*meter, "--", *command],
            env=env,
            stdout=pipe,
            stderr=subprocess.STDOUT if capture else None,
            text=True,
            cwd=Path(__file__).resolve().parent.parent,
        ) as process:
            lines = []
            for line in process.stdout or ():
                lines.append(line)
                if on_line is not None:
                    on_line(line)
            returncode = process.wait()
        if not report.exists():
            raise RuntimeError(f"the process-tree meter failed ({returncode}): {''.join(lines)[-2000:]}")
        usage = TreeUsage(**json.loads(report.read_text()))
    return usage, "".join(lines)


def _children_of(root: int) -> list[int]:
    """Every live descendant of ``root``."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, stack = [], list(children.get(root, []))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def _rss_mib(pids: list[int]) -> float:
    return _summed_kib(pids, "status", "VmRSS:") / 1024


def _pss_mib(pids: list[int]) -> float:
    return _summed_kib(pids, "smaps_rollup", "Pss:") / 1024


def _summed_kib(pids: list[int], name: str, field: str) -> float:
    """The sum over ``pids`` of a ``/proc/PID/NAME`` line's kiB (a process gone meanwhile counts 0)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/{name}") as lines:
            for line in lines:
                if line.startswith(field):
                    total += int(line.split()[1])
                    break
    return total


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process (``/proc/PID/stat`` fields 14 and 15)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuGroup:
    """A cgroup of the tree's own (v2, or v1 ``cpuacct``), or nothing when this process cannot make one: the CPU
    time of every process put in it and of every process those start, whoever reaps them."""

    def __init__(self, label: str = "") -> None:
        self.path: Path | None = None
        name = f"kbackup-bench-{os.getpid()}{label}"
        for root, usage in ((Path("/sys/fs/cgroup"), "cpu.stat"), (Path("/sys/fs/cgroup/cpuacct"), "cpuacct.usage")):
            if not (root / usage).exists() and not (root / "cgroup.controllers").exists():
                continue
            with contextlib.suppress(OSError):
                (root / name).mkdir()
                if (root / name / usage).exists():
                    self.path, self.usage_file = root / name, usage
                    return
                (root / name).rmdir()

    def join(self) -> None:
        """Put the calling process in the group (run in the command's process before it starts)."""
        if self.path is not None:
            (self.path / "cgroup.procs").write_text("0")

    def add(self, pid: int) -> bool:
        """Put a running process in the group (the processes it starts from now on are in it too); false when it
        could not be put there (the group then measures nothing: it is removed)."""
        if self.path is None:
            return False
        try:
            (self.path / "cgroup.procs").write_text(str(pid))
        except OSError:
            self.remove()
            self.path = None
            return False
        return True

    def seconds(self) -> float:
        assert self.path is not None
        text = (self.path / self.usage_file).read_text()
        if self.usage_file == "cpu.stat":
            return int(text.split("usage_usec")[1].split()[0]) / 1e6
        return int(text) / 1e9

    def remove(self, wait: float = 0.0) -> None:
        """Remove the group, waiting up to ``wait`` seconds for its last processes to be gone (a group with a
        process in it cannot be removed)."""
        if self.path is None:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if not (self.path / "cgroup.procs").read_text().strip():
                    break
            time.sleep(0.1)
        with contextlib.suppress(OSError):
            self.path.rmdir()


def _run(command: list[str], grace: float) -> TreeUsage:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    me = os.getpid()
    peak = [0.0, 0.0]  # resident, proportional
    seen: dict[int, float] = {}  # pid -> last CPU seconds sampled
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            tree = _children_of(me)
            peak[0] = max(peak[0], _rss_mib(tree))
            peak[1] = max(peak[1], _pss_mib(tree))
            for pid in tree:
                cpu = _cpu_seconds(pid)
                if cpu is not None:
                    seen[pid] = max(cpu, seen.get(pid, 0.0))
            stop.wait(0.2)

    group = CpuGroup()
    started = time.perf_counter()
    try:
        # Reaped below with every other process of the tree, never by Popen.
        main = subprocess.Popen(command, preexec_fn=group.join if group.path is not None else None)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        reaped_cpu, reaped, returncode, wall, deadline = 0.0, set(), -1, 0.0, float("inf")
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG if deadline < float("inf") else 0)
            except ChildProcessError:
                break
            if pid == 0:  # the command has exited; what it left behind is still running
                if time.monotonic() > deadline:
                    for straggler in _children_of(me):
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(straggler, signal.SIGKILL)
                time.sleep(0.05)
                continue
            reaped.add(pid)
            reaped_cpu += usage.ru_utime + usage.ru_stime
            if pid == main.pid:
                returncode = os.waitstatus_to_exitcode(status)
                wall = time.perf_counter() - started
                deadline = time.monotonic() + grace
        stop.set()
        sampler.join()
        if group.path is not None:
            cpu, source = group.seconds(), "cgroup"
        else:
            cpu, source = max(reaped_cpu, sum(seen.values())), "sampled"
    finally:
        group.remove()
    return TreeUsage(returncode, wall, cpu, peak[0], len(reaped | set(seen)), source, peak[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", required=True, help="where the usage is written (JSON)")
    parser.add_argument("--grace", type=float, default=30.0, help="seconds left to processes the command leaves")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    usage = _run(command, args.grace)
    Path(args.report).write_text(json.dumps(asdict(usage)))
    sys.exit(usage.returncode if usage.returncode >= 0 else 128 - usage.returncode)


if __name__ == "__main__":
    main()
