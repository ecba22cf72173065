"""The benchmarks' process-tree meter counts every process of a tree once, orphans and stragglers included."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from benchmarks.process_tree import measure

# A child that forks a grandchild and exits at once: the grandchild, orphaned, burns 0.3 s of its own CPU time, then
# writes how much it used. Without the subreaper its CPU time would be counted nowhere.
ORPHAN = textwrap.dedent(
    """
    import os, sys, time
    if os.fork() == 0:
        time.sleep(0.2)  # its parent has exited by now: it is an orphan
        while time.process_time() < 0.3:
            pass
        with open(sys.argv[1], "w") as out:
            out.write(str(time.process_time()))
        os._exit(0)
    os._exit(3)
    """
)


def test_an_orphans_cpu_time_is_counted_and_the_commands_exit_code_kept(tmp_path: Path) -> None:
    spent = tmp_path / "spent"
    usage, _ = measure([sys.executable, "-c", ORPHAN, str(spent)])
    assert usage.returncode == 3
    orphan = float(spent.read_text())
    assert orphan >= 0.3
    assert usage.cpu_seconds >= orphan
    assert usage.processes == 2
    assert usage.peak_rss_mib > 0


def test_a_process_left_running_is_killed_after_the_grace_and_counted(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
               "'import time; time.sleep(600)'])"]  # fmt: skip
    usage, _ = measure(command, grace=0.5)
    assert usage.returncode == 0
    assert usage.processes == 2
    assert usage.wall_seconds < 60


# A parent that ignores SIGCHLD, as PySpark's daemon does: the kernel reaps its child without adding the child's CPU
# time to the parent's, so no wait4 anywhere sees it.
IGNORING_PARENT = textwrap.dedent(
    """
    import os, signal, sys, time
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    if os.fork() == 0:
        while time.process_time() < 0.6:
            pass
        os._exit(0)
    time.sleep(1.5)
    """
)


def test_the_cpu_time_of_a_child_no_one_waits_for_is_counted() -> None:
    usage, _ = measure([sys.executable, "-c", IGNORING_PARENT])
    assert usage.returncode == 0
    # Exact in a cgroup; sampled every 0.2 s otherwise, which sees at least most of a 0.6 s process.
    assert usage.cpu_seconds >= (0.6 if usage.cpu_source == "cgroup" else 0.3), usage


# A parent that fills 200 MiB and forks three children that keep it without writing to it (as PySpark's daemons fork
# their workers): every process shows the 200 MiB resident, but the machine holds them once.
SHARING = textwrap.dedent(
    """
    import os, time
    block = bytearray(200 << 20)
    for at in range(0, len(block), 4096):
        block[at] = 1
    children = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            time.sleep(1.5)
            os._exit(0)
        children.append(pid)
    for pid in children:
        os.waitpid(pid, 0)
    """
)


def test_pages_shared_by_forked_processes_are_counted_once_in_the_proportional_peak() -> None:
    usage, _ = measure([sys.executable, "-c", SHARING])
    assert usage.returncode == 0 and usage.processes == 4
    assert usage.peak_rss_mib >= 4 * 200  # the parent and its three children each show the block
    assert 200 <= usage.peak_pss_mib < 300, usage
