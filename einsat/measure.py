"""`einsat.measure` is `einsat.pipeline.measure` (the measured choice moved into the pipeline, #26):
this name stays for the code and tests that import it, and is the same module, so that patching
`einsat.measure.check_measured` patches what the pipeline calls."""

import sys

from einsat.pipeline import measure as _measure

sys.modules[__name__] = _measure
