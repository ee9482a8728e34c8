"""``python -m attnkit``: the ``attnkit`` command (:mod:`attnkit.cli`)."""

import sys

from attnkit.cli import main

if __name__ == "__main__":
    sys.exit(main())
