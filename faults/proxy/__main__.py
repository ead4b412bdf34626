"""``python -m faults.proxy``: see :mod:`faults.proxy.cli`."""

import sys

from .cli import main

sys.exit(main())
