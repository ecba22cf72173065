"""Entry point of the restore job for spark-submit (see :mod:`spark_kafka_backup.restore.job`)."""

import sys

from spark_kafka_backup.restore.job import main

if __name__ == "__main__":
    sys.exit(main())
