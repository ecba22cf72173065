"""spark-submit jobs/backup.py --bootstrap-server HOST:PORT --target-dir DIR --topics T1,T2 [--snapshot]

Backs up Kafka topics into kafka-backup v1 files; see ``--help`` and
``spark_kafka_backup/backup/job.py``. The spark-kafka-backup package must be installed in the Python
environment of the driver and every executor.
"""

import os
import sys

if __name__ == "__main__":  # run as the job (a program importing main keeps its own environment)
    os.environ.setdefault("KBACKUP_WITHOUT_PANDAS", "1")  # no pandas in the job: spark_kafka_backup/arrow_runtime.py

from spark_kafka_backup.backup.job import main

if __name__ == "__main__":
    sys.exit(main())
