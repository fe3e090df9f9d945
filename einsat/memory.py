"""`einsat.memory` is `einsat.pipeline.memory` (the run's memory watch moved into the pipeline,
which keeps it, #26): this name stays for the code and tests that import it, and is the same module."""

import sys

from einsat.pipeline import memory as _memory

sys.modules[__name__] = _memory
