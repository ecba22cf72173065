"""``python -m spark_kafka_backup.cli``: the same as the command."""

import sys

from spark_kafka_backup.cli import main

sys.exit(main())
