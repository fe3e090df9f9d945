"""`python -m einsat.cli ...`: the same as the `einsat` script."""

import sys

from einsat.cli import main

if __name__ == "__main__":  # the process pool's workers are spawned and import the main module again
    sys.exit(main())
