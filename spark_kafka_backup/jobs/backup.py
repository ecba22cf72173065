"""Entry point of the backup job for spark-submit (see :mod:`spark_kafka_backup.backup.job`)."""

import sys

from spark_kafka_backup.backup.job import main

if __name__ == "__main__":
    sys.exit(main())
