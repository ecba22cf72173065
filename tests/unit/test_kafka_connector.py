"""Which Spark Kafka connector the jobs use, and what a user is told while it is fetched (pure logic: the fetching
itself, Ivy against Maven Central, is exercised by every ``--kafka-source spark`` test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_kafka_backup.errors import ArtifactError
from spark_kafka_backup.jars import Artifact
from spark_kafka_backup.spark import kafka_connector


def test_a_connector_missing_from_central_is_followed_by_a_line_saying_why_the_next_is_fetched(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(kafka_connector, "spark_version", lambda: "4.3.0")
    monkeypatch.setattr(kafka_connector, "resolved_dir", lambda name, artifacts: None)
    tried: list[str] = []

    def resolve(name: str, artifacts: list[Artifact]) -> Path:
        tried.append(artifacts[0].version)
        if artifacts[0].version == "4.3.0":
            raise ArtifactError("not found")
        return tmp_path

    monkeypatch.setattr(kafka_connector, "resolve", resolve)
    assert kafka_connector._resolve() == ("4.2.0", tmp_path)
    assert tried == ["4.3.0", "4.2.0"]
    said = capsys.readouterr().out
    assert "spark-sql-kafka-0-10_2.13:4.3.0 could not be fetched (Maven Central does not hold a connector" in said
    assert "trying 4.2.0, the newest before it of Spark 4" in said
