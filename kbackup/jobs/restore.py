"""Entry point of the restore job for spark-submit (see :mod:`kbackup.restore.job`)."""

import sys

from kbackup.restore.job import main

if __name__ == "__main__":
    sys.exit(main())
