"""Running the restore job in tests, and the cluster restores go to."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbackup.spark.submit import REPO, client_config_file, spark_submit_command
from tests.broker import BrokerUnderTest
from tests.kafka_helpers import job_env


@dataclass
class Target:
    """Where restores go: a cluster and a prefix for topic names."""

    broker: BrokerUnderTest
    prefix: str = ""
    counter: list[int] = field(default_factory=lambda: [0])

    def name(self, topic: str) -> str:
        return self.prefix + topic

    def args(self, tmp_path: Path) -> list[str]:
        config = tmp_path / "target.properties"
        client_config_file(config, self.broker.extra_settings)
        return ["--bootstrap-server", self.broker.bootstrap_servers, "--command-config", str(config)]


def restore_command(*args: str | Path) -> list[str]:
    return spark_submit_command("restore", *args)


def run_restore(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(restore_command(*args), capture_output=True, text=True, env=job_env(), cwd=REPO, timeout=600)


def restore_python(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The restore run by plain Python: for dry runs and errors, which never start Spark."""
    return subprocess.run(
        [sys.executable, str(REPO / "jobs" / "restore.py"), *map(str, args)],
        capture_output=True,
        text=True,
        env=job_env(),
        timeout=120,
    )


def group_offsets(broker: BrokerUnderTest, group: str) -> dict[tuple[str, int], int]:
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(broker.client_settings())
    result = {}
    for future in admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)]).values():
        for tp in future.result().topic_partitions:
            if tp.offset >= 0:
                result[(tp.topic, tp.partition)] = tp.offset
    return result


def comparable(records: list[dict[str, Any]], *, topic: str | None = None) -> list[tuple[Any, ...]]:
    """What must survive a restore: partition, order, key, value, headers, timestamp and its type."""
    return [
        (r["partition"], r["key"], r["value"], r["headers"], r["timestampType"], r["timestamp"])
        for r in records
        if topic is None or r["topic"] == topic
    ]
