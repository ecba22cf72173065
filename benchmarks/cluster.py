"""The Kafka cluster a benchmark runs against: an external one, or a local Apache Kafka node."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager

from devkit.kafka_cluster import KafkaCluster


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every Kafka benchmark takes: data shape and cluster."""
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-size", type=int, default=200)
    parser.add_argument("--bootstrap", help="an external cluster instead of a local Apache Kafka node")


@contextmanager
def cluster(bootstrap: str | None) -> Iterator[dict[str, str]]:
    """Client settings for ``bootstrap``, or for a local Apache Kafka node started (and stopped) here."""
    if bootstrap:
        yield {"bootstrap.servers": bootstrap}
        return
    with KafkaCluster() as broker:
        print(f"cluster: {broker.describe()} at {broker.bootstrap_servers}", flush=True)
        yield broker.client_settings()


def kcat_command() -> str | None:
    """Debian's ``kcat`` (the C client's command-line tool), the outside yardstick; ``None`` when missing."""
    import shutil

    return shutil.which("kcat") or shutil.which("kafkacat")


def kcat_settings(settings: dict[str, str]) -> list[str]:
    """Client settings as kcat's ``-X`` options."""
    return [arg for key, value in settings.items() for arg in ("-X", f"{key}={value}")]
