"""Development scaffolding: what the demo, the tests and the benchmarks run kbackup against.

Nothing in the backup and restore jobs imports this package. It holds
:mod:`kbackup.devkit.kafka_cluster` (Apache Kafka started from its own jars,
resolved from Maven Central into a cache) and its command line
(``python -m kbackup.devkit fetch|kafka``).
"""
