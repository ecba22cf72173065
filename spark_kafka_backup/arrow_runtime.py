"""The jobs' Python processes run without pandas.

pyarrow imports pandas, when it is installed, the first time it converts Python values (``pa.array``,
``pa.scalar``: is the input a pandas object?), and looks again at every conversion while the import fails: about
0.5 CPU-s and 40 MB in each Python process of a job (its driver, each of Spark's planning daemons, the streaming
source's runner, every worker), though the jobs convert nothing from or to pandas. In a process whose environment
says so (:data:`VARIABLE`, set by the backup job for its driver, and by every job's Spark session for its Python
workers: :func:`spark_kafka_backup.spark.session.job_session`) ``import pandas`` fails as if pandas were not
installed, and pyarrow converts as it does without it. The restore's and an erase's drivers keep pandas (PySpark's
``DataFrame.mapInArrow``, on their ``--where`` path, checks for it on the driver; the workers do not), and so does a
user's own Spark session (``spark.read.format("kbackup")``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importlib.abc itself costs 20 ms in every process
    from importlib.machinery import ModuleSpec
    from types import ModuleType

#: ``1`` in a process's environment: pandas is not imported in it (see the module docstring).
VARIABLE = "KBACKUP_WITHOUT_PANDAS"


class _WithoutPandas:
    """A finder of ``sys.meta_path`` that refuses ``pandas``: ModuleNotFoundError, which pyarrow and PySpark take
    for "not installed"."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ModuleNotFoundError(
                f"{fullname} is not imported in a spark-kafka-backup job's process ({VARIABLE}=1; "
                f"{VARIABLE}=0 in the driver's environment or --spark-conf spark.executorEnv.{VARIABLE}=0 allows it)",
                name=fullname,
            )
        return None


def without_pandas() -> None:
    """From now on this process does not import pandas (unless it already did)."""
    if "pandas" in sys.modules or any(isinstance(finder, _WithoutPandas) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _WithoutPandas())


if os.environ.get(VARIABLE) == "1":
    without_pandas()
