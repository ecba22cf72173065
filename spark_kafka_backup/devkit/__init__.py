"""Development scaffolding: what the demo, the tests and the benchmarks run spark-kafka-backup against.

Nothing outside this package imports it (``tests/unit/test_layers.py`` checks), so the
jobs and the CLI of an installed spark-kafka-backup never need it. It holds
:mod:`spark_kafka_backup.devkit.kafka_cluster` (Apache Kafka started from its own jars,
resolved from Maven Central into a cache), :mod:`spark_kafka_backup.devkit.spark_cluster`
(a Spark standalone master and workers from the PySpark installation),
:mod:`spark_kafka_backup.devkit.demo` (``./dev demo``) and its command line
(``python -m spark_kafka_backup.devkit fetch|kafka``).
"""
