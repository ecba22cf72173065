"""``python -m devkit fetch`` resolves the jars the tests, demo and benchmarks use;
``python -m devkit kafka [--nodes N]`` runs a local Apache Kafka until interrupted;
``python -m devkit registry`` a local Apicurio Registry (tests/test_schema_registry_server.py)."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence

from spark_kafka_backup.errors import SparkKafkaBackupError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devkit")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("fetch", help="resolve Apache Kafka's and Spark's Kafka connector jars into the cache")
    kafka = commands.add_parser("kafka", help="run a local Apache Kafka cluster until interrupted")
    kafka.add_argument("--nodes", type=int, default=1)
    kafka.add_argument("--port", type=int, help="the first node's client port (default: a free one)")
    commands.add_parser("registry", help="run a local Apicurio Registry (Confluent-compatible API) until interrupted")
    args = parser.parse_args(argv)
    from devkit.kafka_cluster import KafkaCluster, kafka_jars
    from spark_kafka_backup.spark.kafka_connector import connector_jars

    try:
        if args.command == "fetch":
            print(f"Apache Kafka jars: {kafka_jars()}")
            print(f"Spark's Kafka connector jars: {connector_jars()}")
            return 0
        if args.command == "registry":
            from devkit.apicurio import ApicurioRegistry

            with ApicurioRegistry() as registry:
                print(f"Apicurio Registry at {registry.url}; Ctrl-C stops it", flush=True)
                signal.sigwait({signal.SIGINT, signal.SIGTERM})
            return 0
        with KafkaCluster(args.nodes, port=args.port) as cluster:
            print(f"{cluster.describe()} at {cluster.bootstrap_servers}; Ctrl-C stops it", flush=True)
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
        return 0
    except SparkKafkaBackupError as exc:
        print(f"spark-kafka-backup devkit: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    sys.exit(main())
