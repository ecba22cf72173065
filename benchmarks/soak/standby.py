"""The soak's standby (``./dev bench soak --standby``): a follower (``restore --follow``, docs/standby.md) feeding a
second Apache Kafka cluster from the soak's live backup through all of its events, killed with ``kill -9`` now and
then and started again as a service would; at the end it fails the standby over, which is then compared with the
source like the latest state's restore (:mod:`benchmarks.soak.compare`).

Its figures: the standby's lag behind the source every 10 s (the follower's ``kbackup_standby_seconds_behind_source``,
the largest of any partition: an upper bound, which grows for a partition that receives nothing), its passes, and
its exits."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.soak.service import BackupService
from spark_kafka_backup.spark_submit import job_environment, spark_submit_command

#: The follower's options besides the standby's address (the records the soak's source kept for minutes, or deleted,
#: are kept for good on the standby).
FOLLOW_OPTIONS = ("--follow-interval", "10", "--drop-topic-config", "retention.ms", "--drop-topic-config", "segment.ms")


def follower_command(bootstrap: str, backup_dir: Path, metrics_file: Path, *extra: str) -> list[str]:
    return spark_submit_command(
        "restore", "--bootstrap-server", bootstrap, "--source-dir", backup_dir, *FOLLOW_OPTIONS,
        "--metrics-file", metrics_file, "--metrics-interval", "5", *extra, master="local[1]",
    )  # fmt: skip


class Standby:
    """The follower as a service, its kills, and the lag it reports."""

    def __init__(self, bootstrap: str, backup_dir: Path, out: Path, work: Path, *, kill_every: float) -> None:
        self.bootstrap, self.backup_dir, self.out = bootstrap, backup_dir, out
        self.metrics_file = work / "standby-metrics.json"
        self.log_file = out / "follower.log"
        self.log_file.write_bytes(b"")
        self.kill_every = kill_every
        self.kills: list[float] = []
        self.lags: list[tuple[float, float]] = []  # (seconds into the run, largest seconds behind the source)
        self.service = BackupService(self._start, self.log_file, on_restart=lambda pid: None,
                                     name="the standby's follower")  # fmt: skip
        self.began = time.monotonic()
        self._halt = threading.Event()
        self._threads = [threading.Thread(target=self._kill_now_and_then, daemon=True, name="soak-standby-kills"),
                         threading.Thread(target=self._sample, daemon=True, name="soak-standby-lag")]  # fmt: skip

    def _start(self) -> subprocess.Popen[bytes]:
        command = follower_command(self.bootstrap, self.backup_dir, self.metrics_file, "--follow")
        with open(self.log_file, "ab") as log:
            env = job_environment(master="local[1]")
            return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def start(self) -> None:
        self.began = self.service.began = time.monotonic()
        self.service.start()
        for thread in self._threads:
            thread.start()

    def _kill_now_and_then(self) -> None:
        while not self._halt.wait(self.kill_every):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.service.process.pid, signal.SIGKILL)
                self.kills.append(round(time.monotonic() - self.began, 1))
                print("soak: the standby's follower killed (kill -9)", flush=True)

    def _sample(self) -> None:
        while not self._halt.wait(10):
            behind = [m["value"] for m in self.metrics() if m["name"] == "kbackup_standby_seconds_behind_source"]
            if behind:
                self.lags.append((round(time.monotonic() - self.began, 1), max(behind)))

    def metrics(self) -> list[dict[str, Any]]:
        try:
            found: list[dict[str, Any]] = json.loads(self.metrics_file.read_text()).get("metrics", [])
            return found
        except (OSError, ValueError):
            return []

    def caught_up(self, *, after: float, timeout: float) -> bool:
        """Until a pass that began after ``after`` (unix time) left nothing of the backup unrestored."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            metrics = self.metrics()
            ended = [m["value"] for m in metrics if m["name"] == "kbackup_standby_last_pass_timestamp_seconds"]
            seconds = [m["value"] for m in metrics if m["name"] == "kbackup_standby_pass_seconds"]
            behind = [m["value"] for m in metrics if m["name"] == "kbackup_standby_records_behind_backup"]
            if ended and seconds and float(ended[0]) - float(seconds[0]) > after and not any(behind):
                return True
            time.sleep(3)
        return False

    def stop(self, timeout: float) -> int:
        self._halt.set()
        return self.service.stop(timeout)

    def failover(self) -> tuple[int, str]:
        command = follower_command(self.bootstrap, self.backup_dir, self.metrics_file, "--failover")
        done = subprocess.run(command, capture_output=True, text=True, env=job_environment(master="local[1]"),
                              timeout=1800)  # fmt: skip
        (self.out / "failover.log").write_text(done.stdout + done.stderr)
        return done.returncode, done.stdout

    def figures(self) -> dict[str, object]:
        values = sorted(lag for _, lag in self.lags)

        def share(p: float) -> float | None:
            return values[min(len(values) - 1, int(p * len(values)))] if values else None

        return {
            "lag_samples": len(values),
            "seconds_behind_source_p50": share(0.5),
            "seconds_behind_source_p99": share(0.99),
            "seconds_behind_source_max": values[-1] if values else None,
            "follower_kills_at_s": self.kills,
            "follower_exits_unasked": [
                {"at_s": e.at_s, "code": e.code, "last_lines": e.last_lines[-8:]} for e in self.service.exits
            ],
            "passes_logged": self.log_file.read_text(errors="replace").count(" pass "),
        }
