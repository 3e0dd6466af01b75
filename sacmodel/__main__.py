"""``python -m sacmodel ...``: the command line (same as the ``sacmodel`` entry point)."""
import sys

from .cli import main

sys.exit(main())
