"""Limits for a test that asserts what a *finished* search finds (#27: the same program on any load).

`optimize`'s defaults stop saturation at 8 s and the ILP at 5 s; under `make test` with every core
busy those clocks can end a search before the rewrite a test looks for fires, and the test fails on
the load, not on the code. With these, work ends the search (the node, iteration and match limits),
the clocks far off; a test using them asserts that the report's stop reason is not the time.
"""

from einsat.egraph.session import Limits

BY_WORK = {"limits": Limits(time_s=600), "time_limit": 300}
