"""What the soak measures over time, one row every few seconds: memory of the backup's driver and executors, its
lag, how long batches take, the backup's files and bytes, and the warnings and errors its log printed, by kind.

Memory is the resident set of process trees read from ``/proc`` (the driver: the ``spark-submit`` process and its
children; the executors: everything under the Spark workers but the worker JVMs themselves), each also split into its
JVMs' share and their heaps (:mod:`benchmarks.soak.jvm_heap`: old generation used, heap committed), so a resident set
that grows because a heap is still expanding toward ``-Xmx`` is told from live data that grows. Lag and batch times come
from the backup's ``--metrics-file`` (JSON). Written to a CSV as they are taken, so a run killed midway keeps them.
"""

from __future__ import annotations

import csv
import json
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from benchmarks.process_tree import _children_of, _rss_mib
from benchmarks.soak.jvm_heap import heap, is_jvm
from benchmarks.soak.native_memory import native_memory


@dataclass
class Row:
    elapsed_s: float
    driver_rss_mib: float
    executors_rss_mib: float
    lag_records: float
    lag_seconds: float
    batch_age_s: float
    records_written: float
    backup_files: int
    backup_mib: float
    #: The longest micro-batch (trigger) that ended since the last row, and the age of the newest stored consumer
    #: offset round (from reading the groups to storing them), from the backup's log; -1: none since.
    batch_max_s: float
    round_age_s: float
    warnings: int
    errors: int
    #: The JVMs' share of the resident sets above (the rest is Python: the driver's, the executors' workers), their
    #: old generations used and their heaps committed, MiB.
    driver_jvm_rss_mib: float = 0.0
    driver_old_mib: float = 0.0
    driver_heap_committed_mib: float = 0.0
    executors_jvm_rss_mib: float = 0.0
    executors_old_mib: float = 0.0
    executors_heap_committed_mib: float = 0.0


_BATCH = re.compile(r"batch \d+: \d+ records read in ([\d.]+) s")
_ROUND = re.compile(r"consumer offsets of .* stored .*, ([\d.]+) s after they were read")
#: A log line's level and the first words after the logger, which name its kind.
_LOG_LINE = re.compile(r"\b(WARN|WARNING|ERROR)\b[^:]*: (.{0,60})")


class Sampler(threading.Thread):
    """Takes a :class:`Row` every ``interval`` seconds into ``csv_path`` until stopped."""

    def __init__(
        self,
        csv_path: Path,
        *,
        driver_pid: int,
        worker_pids: Callable[[], list[int]],
        metrics_file: Path,
        backup_dir: Path,
        log_file: Path,
        interval: float = 10.0,
        native_csv: Path | None = None,
        native_every: int = 6,
    ) -> None:
        super().__init__(daemon=True, name="soak-sampler")
        self.csv_path, self.driver_pid, self.worker_pids = csv_path, driver_pid, worker_pids
        self.metrics_file, self.backup_dir, self.log_file, self.interval = metrics_file, backup_dir, log_file, interval
        self.rows: list[Row] = []
        self.kinds: Counter[str] = Counter()
        self._log_at = 0
        #: Where the executors' native memory by category goes, every ``native_every`` samples (None: not asked).
        self.native_csv, self.native_every = native_csv, native_every
        #: Rows that could not be taken, and why the last one could not.
        self.failures = 0
        self.last_failure = ""
        self._halt = threading.Event()
        self._began = time.monotonic()

    def run(self) -> None:
        with open(self.csv_path, "w", newline="") as out:
            writer = csv.DictWriter(out, [f.name for f in fields(Row)])
            writer.writeheader()
            taken = 0
            while not self._halt.wait(self.interval):
                taken += 1
                if self.native_csv is not None and taken % self.native_every == 0:
                    self._native_memory()
                try:
                    row = self.take()
                except Exception as exc:  # a row lost, never the sampler: the run's end waits on its rows
                    self.failures += 1
                    self.last_failure = f"{type(exc).__name__}: {exc}"
                    continue
                self.rows.append(row)
                writer.writerow(asdict(row))
                out.flush()

    def take(self) -> Row:
        metrics = self._metrics()
        lag = [m["value"] or 0 for m in metrics if m["name"] == "kbackup_backup_lag_records"]
        lag_s = [m["value"] or 0 for m in metrics if m["name"] == "kbackup_backup_lag_seconds"]
        last_batch = next((m["value"] for m in metrics if m["name"] == "kbackup_backup_last_batch_timestamp_seconds"),
                          None)  # fmt: skip
        written = sum(m["value"] or 0 for m in metrics if m["name"] == "kbackup_backup_records_written_total")
        files, size = _tree_size(self.backup_dir)
        warnings, errors, batch_max, round_age = self._read_log()
        driver = [self.driver_pid, *_children_of(self.driver_pid)]
        executors = self._executor_pids()
        driver_jvm, executors_jvm = _jvm_figures(driver), _jvm_figures(executors)
        return Row(
            elapsed_s=round(time.monotonic() - self._began, 1),
            driver_rss_mib=round(_rss_mib(driver), 1),
            executors_rss_mib=round(_rss_mib(executors), 1),
            lag_records=sum(lag),
            lag_seconds=max(lag_s, default=0),
            batch_age_s=round(time.time() - last_batch, 1) if last_batch else -1,
            records_written=written,
            backup_files=files,
            backup_mib=round(size / 2**20, 1),
            batch_max_s=batch_max,
            round_age_s=round_age,
            warnings=warnings,
            errors=errors,
            driver_jvm_rss_mib=driver_jvm[0],
            driver_old_mib=driver_jvm[1],
            driver_heap_committed_mib=driver_jvm[2],
            executors_jvm_rss_mib=executors_jvm[0],
            executors_old_mib=executors_jvm[1],
            executors_heap_committed_mib=executors_jvm[2],
        )

    def follow(self, driver_pid: int) -> None:
        """Measure this driver from now on (the backup was started again)."""
        self.driver_pid = driver_pid

    def _native_memory(self) -> None:
        """One row per executor JVM and category into :attr:`native_csv` (:mod:`benchmarks.soak.native_memory`)."""
        assert self.native_csv is not None
        elapsed = round(time.monotonic() - self._began, 1)
        rows = []
        for pid in self._executor_pids():
            if is_jvm(pid):
                rows += [(elapsed, pid, name, round(mib, 1)) for name, mib in native_memory(pid).items()]
        fresh = not self.native_csv.exists()
        with open(self.native_csv, "a", newline="") as out:
            writer = csv.writer(out)
            if fresh:
                writer.writerow(["elapsed_s", "pid", "category", "committed_mib"])
            writer.writerows(rows)

    def _executor_pids(self) -> list[int]:
        pids: list[int] = []
        # Asked each time: a worker killed and started again has a new pid (the soak's first hour measured only
        # the surviving worker's executor after the first kill).
        for worker in self.worker_pids():
            pids.extend(_children_of(worker))
        return pids

    def _metrics(self) -> list[dict[str, Any]]:
        try:
            document = json.loads(self.metrics_file.read_text())
        except (OSError, ValueError):
            return []
        found: list[dict[str, Any]] = document.get("metrics", [])
        return found

    def _read_log(self) -> tuple[int, int, float, float]:
        """Warnings and errors the backup's log printed so far (kinds counted in :attr:`kinds`), the longest batch
        and the newest offset round's age since the last call."""
        try:
            with open(self.log_file, "rb") as log:
                log.seek(self._log_at)
                text = log.read().decode(errors="replace")
                self._log_at = log.tell()
        except OSError:
            text = ""
        for match in _LOG_LINE.finditer(text):
            kind = re.sub(r"[0-9]+", "N", match.group(2)).split(",")[0]
            self.kinds[f"{match.group(1)} {kind}"] += 1
        warnings = sum(n for kind, n in self.kinds.items() if kind.startswith("WARN"))
        errors = sum(n for kind, n in self.kinds.items() if kind.startswith("ERROR"))
        batches = [float(m.group(1)) for m in _BATCH.finditer(text)]
        rounds = [float(m.group(1)) for m in _ROUND.finditer(text)]
        return warnings, errors, max(batches, default=-1.0), rounds[-1] if rounds else -1.0

    def stop(self) -> None:
        self._halt.set()
        self.join(60)


def _jvm_figures(pids: list[int]) -> tuple[float, float, float]:
    """The JVMs among ``pids``: their resident sets, old generations used and heaps committed, summed, MiB."""
    jvms = [pid for pid in pids if is_jvm(pid)]
    heaps = [found for found in map(heap, jvms) if found is not None]
    return (
        round(_rss_mib(jvms), 1),
        round(sum(h.old_mib for h in heaps), 1),
        round(sum(h.committed_mib for h in heaps), 1),
    )


def _tree_size(root: Path) -> tuple[int, int]:
    files = size = 0
    for directory, _, names in os.walk(root):
        for name in names:
            try:
                size += os.stat(os.path.join(directory, name)).st_size
                files += 1
            except OSError:
                continue
    return files, size
