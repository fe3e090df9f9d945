"""`python -m einsat.cli ...`: the same as the `einsat` script."""

import sys

from einsat.cli import main

sys.exit(main())
