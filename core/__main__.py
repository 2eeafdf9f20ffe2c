"""``python -m toolwire``: the same command line as the ``toolwire`` script."""

from __future__ import annotations

import sys

from .apps.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
