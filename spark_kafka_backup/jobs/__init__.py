"""The files ``spark-submit`` runs: the jobs' entry points inside the installed package.

``spark-kafka-backup backup`` and ``spark-kafka-backup restore`` (:mod:`spark_kafka_backup.launcher`) submit these,
so no checkout is needed; ``jobs/*.py`` in the source tree are the same entry
points for ``spark-submit`` users. Each file is a few lines around the job's
``main`` and must stay runnable as a script (``__main__``).
"""

from pathlib import Path

#: The directory of the job files.
JOBS_DIR = Path(__file__).resolve().parent


def job_file(name: str) -> Path:
    """The entry file of job ``name`` (``backup`` or ``restore``)."""
    return JOBS_DIR / f"{name}.py"
