"""A job's Python processes import no pandas (spark_kafka_backup/arrow_runtime.py); a user's do as before.

Each check is a fresh interpreter (what was imported is the point); the last, a job's Spark session on the
test worker's JVM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pyarrow as pa

from spark_kafka_backup.arrow_runtime import VARIABLE

#: In a fresh interpreter: what a backup task and a restore task do with pyarrow (records encoded from columns,
#: decoded back, scalars and arrays made from Python values), then whether pandas was imported and can be.
_TASK = """
import hashlib, json, sys
import numpy as np
import pyarrow as pa
import spark_kafka_backup.spark.kafka_source, spark_kafka_backup.restore.job  # the tasks' and the jobs' imports
from spark_kafka_backup.format.record_columns import decode_columns, encode_columns

n = 50
headers = pa.array([[{"key": "h", "value": b"%d" % i}] if i % 3 else None for i in range(n)],
                   pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))
encoded = encode_columns(np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int32), np.arange(n, dtype=np.int64) * 7,
                         pa.array([b"k%d" % i if i % 5 else None for i in range(n)], pa.binary()),
                         pa.array([b"v" * i for i in range(n)], pa.binary()), headers)
decoded = decode_columns(encoded.data, encoded.offsets, encoded.bounds[:-1], encoded.lengths)
data = bytes(encoded.data)
values = [data[s:s + n] for s, n in zip(decoded.value_starts, decoded.value_lengths)]
assert values == [b"v" * i for i in range(n)] and list(decoded.header_counts) == [1 if i % 3 else 0 for i in range(n)]
seen = "pandas" in sys.modules
try:
    import pandas
    refused = None
except ImportError as error:
    refused = str(error)
print(json.dumps({"pandas_imported": seen, "refused": refused,
                  "encoded": hashlib.sha256(bytes(encoded.data)).hexdigest()}))
"""


def _run(environment: dict[str, str], prelude: str = "") -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", prelude + _TASK], env=environment, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def _environment(**extra: str) -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items() if key != VARIABLE}
    return {**environment, **extra}


def test_a_jobs_process_imports_no_pandas_and_encodes_the_same_bytes() -> None:
    job = _run(_environment(**{VARIABLE: "1"}))
    user = _run(_environment())

    assert job["pandas_imported"] is False  # pyarrow's conversions did not import it
    assert job["refused"] is not None and VARIABLE in str(job["refused"])  # an import says why it fails
    # Elsewhere (a user's own session reading with spark.read.format("kbackup")) pyarrow imports pandas as before.
    assert user["pandas_imported"] is True and user["refused"] is None
    assert job["encoded"] == user["encoded"]


def test_pandas_imported_before_the_package_stays_usable() -> None:
    imported_first = _run(_environment(**{VARIABLE: "1"}), prelude="import pandas\n")
    assert imported_first["pandas_imported"] is True and imported_first["refused"] is None


def test_any_other_value_leaves_pandas_alone() -> None:
    assert _run(_environment(**{VARIABLE: "0"}))["refused"] is None


def _worker_says(_: int) -> tuple[str | None, bool]:
    """In a Python worker: its variable, and whether a backup task's imports and a conversion imported pandas."""
    import os
    import sys

    import pyarrow as pa

    import spark_kafka_backup.spark.kafka_source  # noqa: F401 (what a backup task imports)

    pa.array([b"x"], pa.binary())  # a conversion from Python values, which imports pandas where it may
    return os.environ.get(VARIABLE), "pandas" in sys.modules


def _mapped_in_arrow(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A ``mapInArrow`` function, as the restore's ``--where`` runs one (restore/matching.py): its worker's variable,
    and whether the columns it built from Python values imported pandas."""
    import os
    import sys

    import pyarrow as pa

    for batch in batches:
        variable = [os.environ.get(VARIABLE)] * batch.num_rows
        yield pa.RecordBatch.from_pydict({"variable": variable, "pandas": ["pandas" in sys.modules] * batch.num_rows})


def test_a_jobs_spark_session_gives_its_python_workers_no_pandas() -> None:
    """The executors' workers of the jobs' sessions (the backup's driver sets the variable for itself,
    jobs/backup.py; the restore's keeps pandas, which PySpark's ``mapInArrow`` asks for on the driver; a user's
    ``spark.executorEnv.KBACKUP_WITHOUT_PANDAS=0`` is applied after the job's own settings, so it wins); the
    ``mapInArrow`` of a restore's ``--where`` runs in such workers."""
    from pyspark import cloudpickle

    from spark_kafka_backup.spark.session import job_session
    from tests.in_process import spark_session

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # type: ignore[no-untyped-call]  # tests not imported

    def made() -> object:
        return job_session("kbackup-test", debug=False, spark_conf={}, umask=0o022)

    with spark_session(made) as spark:  # on this worker's kept JVM
        said = [tuple(row) for row in spark.sparkContext.parallelize([0], 1).map(_worker_says).collect()]
        mapped = spark.range(3, numPartitions=1).mapInArrow(_mapped_in_arrow, "variable string, pandas boolean")
        mapped_said = {tuple(row) for row in mapped.collect()}
    assert said == [("1", False)]
    assert mapped_said == {("1", False)}
