"""Entry point of the backup job for spark-submit (see :mod:`kbackup.backup.job`)."""

import sys

from kbackup.backup.job import main

if __name__ == "__main__":
    sys.exit(main())
