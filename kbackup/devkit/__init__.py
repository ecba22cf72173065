"""Development scaffolding: what the demo, the tests and the benchmarks run kbackup against.

Nothing outside this package imports it (``tests/test_layers.py`` checks), so the
jobs and the CLI of an installed kbackup never need it. It holds
:mod:`kbackup.devkit.kafka_cluster` (Apache Kafka started from its own jars,
resolved from Maven Central into a cache), :mod:`kbackup.devkit.spark_cluster`
(a Spark standalone master and workers from the PySpark installation),
:mod:`kbackup.devkit.demo` (``./dev demo``) and its command line
(``python -m kbackup.devkit fetch|kafka``).
"""
