"""The optimize report as an HTML page (issue 31): ids unique per page with every reference
resolved, the measurement of a measured cost model shown as the text report shows it, one cost
model named in every cost label, and "new" nodes that are new."""

import dataclasses
import re

import pytest

import einsat
from einsat.egraph import Limits
from einsat.ir import GraphBuilder
from einsat.runtime.profiler import judge
from einsat.viz.report import report_html


@pytest.fixture(scope="module")
def result():
    b = GraphBuilder("block")
    x = b.input("x", (8, 16))
    w1, w2 = b.weight("w1", (16, 16)), b.weight("w2", (16, 16))
    return einsat.optimize(b.build(b.relu(b.add(b.matmul(x, w1), b.matmul(x, w2)))),
                           limits=Limits(nodes=2000, iterations=4, time_s=60), time_limit=2)


def test_ids_are_unique_per_page_and_every_reference_resolves(result):
    html = report_html(result.report, before=result.input, after=result.graph)
    assert html.count("<svg") >= 4  # two programs, growth, cost bars, times
    ids = re.findall(r"""\sid=['"]([^'"]+)['"]""", html)
    assert ids and len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    refs = set(re.findall(r"url\(#([^)]+)\)", html)) | set(re.findall(r"""href=['"]#([^'"]+)['"]""", html))
    assert refs and refs <= set(ids), refs - set(ids)
    # each svg's references stay inside that svg (a picture never borrows another's marker)
    for svg in re.findall(r"<svg.*?</svg>", html, flags=re.S):
        own = set(re.findall(r"""\sid=['"]([^'"]+)['"]""", svg))
        used = set(re.findall(r"url\(#([^)]+)\)", svg)) | set(re.findall(r"""href=['"]#([^'"]+)['"]""", svg))
        assert used <= own, used - own


def test_two_reports_in_one_notebook_share_no_id(result):
    page = result._repr_html_() + result.report._repr_html_()
    ids = re.findall(r"""\sid=['"]([^'"]+)['"]""", page)
    assert len(ids) == len(set(ids))


def measured_report(report, kept: bool):
    """`report` as a measured model's run reports it: the side-by-side timing (a verdict made
    by `judge` from fixed rounds: 0.9x, not faster) and, when `kept`, the input returned."""
    base = [470.0 + k for k in range(15)]
    comparison = judge(base, [v / 0.9 for v in base])
    measured = {**comparison.to_dict(), "measured_at": None, "predicted_ms": [27.413, 25.321]}
    return dataclasses.replace(report, measured=measured,
                               kept_input="the optimized program was not measured faster" if kept else None)


def test_the_html_shows_the_measurement_and_which_program_was_returned(result):
    r = measured_report(result.report, kept=True)
    html = report_html(r)
    text = re.sub(r"<[^>]+>", "", html)
    assert "measured on onnxruntime" in text
    assert f"{r.measured['speedup']:.3f}x measured" in text
    assert "returned: the INPUT program" in text
    assert "measured speedup 1.000x" in text  # what the user gets: the input, as fast as it was
    kept = re.sub(r"<[^>]+>", "", report_html(measured_report(result.report, kept=False)))
    assert "returned: the INPUT" not in kept and f"measured speedup {r.measured['speedup']:.3f}x" in kept
