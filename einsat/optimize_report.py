"""`einsat.optimize_report` is `einsat.pipeline.report` (the report moved into the pipeline, #26):
this name stays for the code and tests that import it, and is the same module."""

import sys

from einsat.pipeline import report as _report

sys.modules[__name__] = _report
