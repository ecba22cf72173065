"""``python -m spark_kafka_backup``: the same as the ``spark-kafka-backup`` command."""

import sys

from spark_kafka_backup.cli import main

sys.exit(main())
