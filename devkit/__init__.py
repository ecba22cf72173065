"""Development scaffolding: what the demo, the tests and the benchmarks run spark-kafka-backup against.

It lives beside the package in the repository, not in it: the wheel does not carry it (``tests/test_wheel.py``
checks) and nothing of ``spark_kafka_backup`` imports it (``tests/unit/test_layers.py`` checks), so the jobs and the
CLI of an installed spark-kafka-backup, and every executor, never see it. Run from the checkout's root (``./dev``
does). It holds
:mod:`devkit.kafka_cluster` (Apache Kafka started from its own jars,
resolved from Maven Central into a cache), :mod:`devkit.spark_cluster`
(a Spark standalone master and workers from the PySpark installation),
:mod:`devkit.demo` (``./dev demo``) and its command line
(``python -m devkit fetch|kafka``).
"""
