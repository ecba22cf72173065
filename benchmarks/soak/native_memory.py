"""Where a JVM's memory goes, by the JVM's own account: Native Memory Tracking's summary, asked with ``jcmd PID
VM.native_memory summary`` of a JVM started with ``-XX:NativeMemoryTracking=summary``.

The soak starts its executors so, and writes every category's committed size once a minute to ``native-memory.csv``:
a resident set that grows outside the heap (the first hours showed executors' +40-55 MiB an hour with heap flat) is
then the code cache, metaspace, threads, GC structures or what the JVM calls Other (direct buffers), or none of them
(then the C allocator of native libraries, which tracking does not see). A ``jcmd`` starts a JVM of its own: asked once
a minute, not every sample.
"""

from __future__ import annotations

import re
import subprocess

#: ``-   Java Heap (reserved=262144KB, committed=262144KB)``: a category and its committed KiB.
_CATEGORY = re.compile(r"^-\s+(.+?) \(reserved=\d+KB, committed=(\d+)KB\)", re.MULTILINE)
_TOTAL = re.compile(r"^Total: reserved=\d+KB, committed=(\d+)KB", re.MULTILINE)

#: The option that turns tracking on (a little CPU and memory of its own; for measuring, not for production).
TRACKING = "-XX:NativeMemoryTracking=summary"


def parse_summary(text: str) -> dict[str, float]:
    """Committed MiB by category (and ``Total``) of a summary; empty when the text is not one (tracking off)."""
    found = {name: int(kib) / 1024 for name, kib in _CATEGORY.findall(text)}
    total = _TOTAL.search(text)
    if total:
        found["Total"] = int(total.group(1)) / 1024
    return found


def native_memory(pid: int, *, timeout: float = 20.0) -> dict[str, float]:
    """The summary of the JVM ``pid``; empty when it cannot be had (gone, tracking off, ``jcmd`` missing or slow)."""
    try:
        answer = subprocess.run(["jcmd", str(pid), "VM.native_memory", "summary"], capture_output=True, text=True,
                                timeout=timeout, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_summary(answer.stdout)
