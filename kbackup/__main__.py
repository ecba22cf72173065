"""``python -m kbackup``: the same as the ``kbackup`` command."""

import sys

from kbackup.cli import main

sys.exit(main())
