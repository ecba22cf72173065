"""``python tests/data_source_query.py ROOT [WHERE ...]``: read a backup with the ``kbackup`` data source in a Spark
session of this process's own (``local[2]``), whole (query 0) then filtered by each ``WHERE`` (queries 1, 2 ...), and
print the rows as ``cat`` prints records with the query's number added, one JSON line each, in (topic, partition,
offset) order. For reads whose driver needs an environment the tests' kept JVM was not started
with (credentials of an S3 server started later). Also where :func:`as_cat` lives."""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

_TYPES = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}


def as_cat(rows: list[Any]) -> list[dict[str, Any]]:
    """Data source rows in ``cat``'s JSON form, in (topic, partition, offset) order."""

    def b64(data: bytes | None) -> str | None:
        return None if data is None else base64.b64encode(data).decode()

    shown = [
        {
            "topic": row.topic,
            "partition": row.partition,
            "offset": row.offset,
            "timestampType": _TYPES[row.timestampType],
            "timestamp": None if row.timestamp is None else round(row.timestamp.timestamp() * 1000),
            "key": b64(row.key),
            "value": b64(row.value),
            "headers": [[header.key, b64(header.value)] for header in row.headers or ()],
        }
        for row in rows
    ]
    return sorted(shown, key=lambda r: (r["topic"], r["partition"], r["offset"]))


def main(argv: list[str]) -> None:
    from pyspark.sql import SparkSession

    from spark_kafka_backup.datasource import register

    spark = SparkSession.builder.master("local[2]").config("spark.log.level", "ERROR").getOrCreate()
    try:
        register(spark)
        df = spark.read.format("kbackup").load(argv[0])
        for number, where in enumerate(["true", *argv[1:]]):
            for line in as_cat(df.filter(where).collect()):
                print(json.dumps({"query": number, **line}, separators=(",", ":")))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
