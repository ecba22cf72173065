"""spark-submit jobs/restore.py --bootstrap-server HOST:PORT --source-dir DIR [--topics T1,T2] [--dry-run]

Restores a kafka-backup v1 backup into a Kafka cluster and remaps consumer
group offsets; see ``--help`` and ``spark_kafka_backup/restore/job.py``. The spark-kafka-backup
package must be installed in the Python environment of the driver and every
executor.
"""

import sys

from spark_kafka_backup.restore.job import main

if __name__ == "__main__":
    sys.exit(main())
