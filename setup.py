"""The compiled parts of spark-kafka-backup, each optional: an install without a C compiler still works, on the
reference path (confluent-kafka's client, numpy).

- ``spark_kafka_backup.kafka._native_kafka``, the native Kafka edge (spark_kafka_backup/kafka/columnar.py): C linked
  against nothing, it opens confluent-kafka's librdkafka at run time;
- ``spark_kafka_backup.format._native_records``, the records' compiled scanner
  (spark_kafka_backup/format/record_columns.py): plain C.

``KBACKUP_PURE_WHEEL=1`` builds without them: a ``py3-none-any`` wheel for any platform and Python (``./dev
wheels`` builds it beside the platform wheel). Everything else of the build is in pyproject.toml.
"""

import os

from setuptools import Extension, setup

COMPILED = [
    Extension(
        "spark_kafka_backup.kafka._native_kafka",
        sources=[
            "spark_kafka_backup/kafka/_native/module.c",
            "spark_kafka_backup/kafka/_native/rdkafka.c",
            "spark_kafka_backup/kafka/_native/consume.c",
            "spark_kafka_backup/kafka/_native/produce.c",
        ],
        depends=["spark_kafka_backup/kafka/_native/rdkafka.h"],
        optional=True,
        extra_compile_args=["-O2", "-Wall"],
    ),
    Extension(
        "spark_kafka_backup.format._native_records",
        sources=["spark_kafka_backup/format/_native/records.c"],
        optional=True,
        extra_compile_args=["-O2", "-Wall"],
    ),
]

setup(ext_modules=[] if os.environ.get("KBACKUP_PURE_WHEEL") == "1" else COMPILED)
