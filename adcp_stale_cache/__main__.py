"""``python -m adcp_stale_cache`` runs the console script."""

import sys

from .cli import main

sys.exit(main())
