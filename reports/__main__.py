"""`python -m reports analyze RUN_DIR...` (see reports/cli.py)."""

import sys

from reports.cli import main

sys.exit(main())
