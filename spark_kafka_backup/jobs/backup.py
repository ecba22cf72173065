"""Entry point of the backup job for spark-submit (see :mod:`spark_kafka_backup.backup.job`)."""

import os
import sys

if __name__ == "__main__":  # run as the job (a program importing main keeps its own environment)
    os.environ.setdefault("KBACKUP_WITHOUT_PANDAS", "1")  # no pandas in the job: spark_kafka_backup/arrow_runtime.py

from spark_kafka_backup.backup.job import main

if __name__ == "__main__":
    sys.exit(main())
