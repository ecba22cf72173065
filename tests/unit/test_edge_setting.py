"""A mistyped KBACKUP_KAFKA_EDGE is refused by the job's driver before anything changes, not first by a task."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_kafka_backup.backup.job import BackupJob
from spark_kafka_backup.backup.settings import parse_backup_args
from spark_kafka_backup.kafka.columnar import EDGE_ENV, NativeEdgeError
from spark_kafka_backup.restore import job as restore_job
from spark_kafka_backup.restore.settings import parse_restore_args


def test_both_jobs_refuse_a_mistyped_edge_before_touching_the_cluster_or_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EDGE_ENV, "fast")
    # Port 1: nothing answers there; the refusal must come before any attempt.
    target = tmp_path / "backup"
    backup = parse_backup_args(["--bootstrap-server", "127.0.0.1:1", "--target-dir", str(target), "--topics", "t"])
    with pytest.raises(NativeEdgeError, match="KBACKUP_KAFKA_EDGE='fast': expected 'native', 'reference' or nothing"):
        BackupJob(backup).run()
    assert not target.exists()
    source = tmp_path / "source"
    source.mkdir()
    restore = parse_restore_args(["--bootstrap-server", "127.0.0.1:1", "--source-dir", str(source)])
    with pytest.raises(NativeEdgeError, match="KBACKUP_KAFKA_EDGE='fast'"):
        restore_job.run(restore)
