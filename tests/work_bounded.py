"""Limits for a test that asserts what a *finished* search finds (#27: the same program on any load).

`optimize`'s defaults stop saturation at 8 s and the ILP at 5 s; under `make test` with every core
busy those clocks can end a search before the rewrite a test looks for fires, and the test fails on
the load, not on the code. With these, work ends the search (the node, iteration and match limits),
the clocks far off; a test using them asserts so with `ended_by_work`.
"""

from einsat.egraph.session import Limits

SEARCH_S, EXTRACT_S = 600.0, 300.0  # far off: only a hung search reaches them


def work_limits(**limits) -> Limits:
    """`Limits(**limits)` with saturation's and the ILP's clocks far off (for a `Session`, or
    `optimize`'s `limits`), unless `limits` sets them."""
    return Limits(**{"time_s": SEARCH_S, "extract_s": EXTRACT_S, **limits})


def by_work(**limits) -> dict:
    """`optimize`'s keyword arguments: `work_limits(**limits)`, the clocks far off."""
    return {"limits": work_limits(**limits)}


BY_WORK = by_work()


def ended_by_work(report) -> None:
    """Work ended `report`'s search and extraction, not their clocks."""
    assert "time" not in report.saturation.stop_reason, report.saturation.stop_reason
    assert "time limit" not in report.extraction.status, report.extraction.status
