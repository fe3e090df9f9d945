"""An optimization report as HTML: the summary table, the pictures, the search and the check.

    html = report_html(result.report, before=result.input, after=result.graph)
    Path("report.html").write_text(html)          # one self-contained file: every picture inline

The pictures are inline SVG (program graphs before and after, drawn by `viz.graph`, changed
nodes marked; the e-graph's growth, per-op cost bars and time per phase, drawn by
`viz.charts`). Programs above `MAX_DRAWN` nodes are not drawn (the table still counts their
ops). `standalone=False` gives the fragment a notebook shows (`Report._repr_html_`).
"""

from __future__ import annotations

import secrets
from html import escape

from einsat.viz import charts
from einsat.viz.graph import changed_nodes, graph_svg
from einsat.viz.svg import unique_ids

MAX_DRAWN = 250
PAGE_STYLE = "body { font-family: DejaVu Sans, Helvetica, Arial, sans-serif; margin: 24px; color: #222; }"
STYLE = """
.einsat-report table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
.einsat-report td, .einsat-report th { border-bottom: 1px solid #dee2e6; padding: 3px 10px; text-align: right; }
.einsat-report td:first-child, .einsat-report th:first-child { text-align: left; }
.einsat-report .pictures { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
.einsat-report figure { margin: 0; overflow-x: auto; max-width: 100%; }
.einsat-report figcaption { font-size: 12px; color: #555; }
.einsat-report p { font-size: 13px; }
"""


def _table(rows, head: bool = True) -> str:
    out = []
    for k, row in enumerate(rows):
        tag = "th" if head and k == 0 else "td"
        out.append("<tr>" + "".join(f"<{tag}>{escape(str(c))}</{tag}>" for c in row) + "</tr>")
    return "<table>" + "".join(out) + "</table>"


def _figures(prefix: str):
    """A figure maker for one page: each picture's ids get their own prefix (`svg.unique_ids`)."""
    count = iter(range(1, 1 << 30))

    def figure(svg: str, caption: str) -> str:
        svg = unique_ids(svg, f"{prefix}f{next(count)}-")
        return f"<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>"
    return figure


def _partition(p, unit: str) -> list[str]:
    """A partitioned run (`einsat.partition.PartitionSummary`): its pieces and its cuts."""
    head = ("piece", "nodes", "fingerprint", "program", f"cost before ({unit})", f"cost after ({unit})", "seconds")
    pieces = [head] + [
        (str(q.index), f"{q.start}-{q.stop - 1} ({q.nodes})", q.fingerprint,
         (f"piece {q.template}'s" if q.cache_hit else f"optimized ({q.stop_reason or '-'})") +
         (f"; {q.fallback}" if q.fallback else ""), f"{q.cost_before:,.2f}", f"{q.cost_after:,.2f}", f"{q.seconds:.2f}")
        for q in p.pieces]
    cuts = [("after node", "values crossing", "producers", "bytes", f"modeled ({unit})")] + [
        (f"{c.after} ({c.node})" + (" forced" if c.forced else " repeat" if c.repeat else ""), ", ".join(c.values),
         ", ".join(c.producers),
         f"{c.bytes:,}", "-" if c.modeled is None else f"{c.modeled:,.3f}") for c in p.cuts]
    return [f"<h3>Partition</h3><p>{escape(str(p).splitlines()[0])}</p>", _table(pieces), _table(cuts)]


def report_html(report, before=None, after=None, standalone: bool = True) -> str:
    r = report
    # a page's ids are its own; fragments in a notebook share the notebook's page (and outlive a
    # kernel's restart), so each gets a random prefix
    _figure = _figures("einsat-" if standalone else f"einsat-{secrets.token_hex(4)}-")
    parts = [f"<h2>einsat optimize: {escape(r.name)}</h2>"]
    if r.interrupted:
        parts.append("<p><b>Interrupted</b>: the best program found so far, verified.</p>")
    parts.append(f"<p>modeled speedup <b>{r.speedup:.3f}x</b> ({r.reduction:+.1%} of the modeled cost removed, "
                 f"{escape(r.model_label or r.model)} cost model, {escape(r.unit)})</p>")
    if r.measured is not None or r.kept_input:
        speedup = r.measured_speedup
        parts.append(f"<p>measured speedup <b>{speedup:.3f}x</b>"
                     + (" (the input program was returned)" if r.kept_input else "") + "</p>")
    parts.append(_table(r.table()))
    measured = [line.strip() for line in getattr(r, "fp32_lines", list)() + r.measured_lines()]
    if measured:
        parts.append("".join(f"<p>{escape(line)}</p>" for line in measured))
    programs = []
    if before is not None and len(before.nodes) <= MAX_DRAWN:
        programs.append(_figure(graph_svg(before, title="input"), f"input: {len(before.nodes)} nodes"))
    if after is not None and len(after.nodes) <= MAX_DRAWN:
        # after is optimize's result: its values are named after the input's they are equal to
        changed = changed_nodes(before, after, same_names=True) if before is not None else set()
        programs.append(_figure(graph_svg(after, changed=changed, title="optimized"),
                                f"optimized: {len(after.nodes)} nodes, {len(changed)} new (orange)"))
    if programs:
        parts.append("<h3>Programs</h3><div class='pictures'>" + "".join(programs) + "</div>")
    pictures = []
    s = r.saturation
    if s is not None and s.phases:
        pictures.append(_figure(charts.growth_svg(s.phases), f"{s.enodes:,} e-nodes in {s.eclasses:,} e-classes"))
    if r.cost_by_op_before or r.cost_by_op_after:
        caption = "modeled cost per op"
        sums = sum(r.cost_by_op_before.values()), sum(r.cost_by_op_after.values())
        if any(abs(a - b) > 1e-6 * max(abs(b), 1e-12) for a, b in zip(sums, (r.cost_before, r.cost_after))):
            # a model whose program cost is more than its nodes' (fusion groups, layouts, a call's overhead)
            caption += (f": each node alone, summing to {sums[0]:,.2f} -> {sums[1]:,.2f} {r.unit} (the table's "
                        f"program costs, {r.cost_before:,.2f} -> {r.cost_after:,.2f}, count the program as it runs)")
        pictures.append(_figure(charts.cost_bars_svg(r.cost_by_op_before, r.cost_by_op_after, r.unit), caption))
    if r.times:
        pictures.append(_figure(charts.times_svg(r.times), "measured time per phase of this run"))
    if pictures:
        parts.append("<h3>Search and cost</h3><div class='pictures'>" + "".join(pictures) + "</div>")
    if s is not None:
        parts.append(f"<p><b>e-graph</b>: {escape(str(s))}</p>")
        top = s.busiest(10)
        if top:
            parts.append(_table([("rule", "matches")] + [(k, f"{v:,}") for k, v in top]))
    parts.append(f"<p><b>extraction</b>: {escape(r.extraction_text())}</p>")
    if getattr(r, "partition", None) is not None:
        parts += _partition(r.partition, r.unit)
    check = "NOT RUN: the result is unchecked" if r.verification is None else str(r.verification)
    parts.append(f"<p><b>verification</b>: {escape(check)}</p>")
    if r.memory:
        parts.append(f"<p><b>memory</b>: {escape(r.memory_text())}</p>")
    body = "<div class='einsat-report'>" + "".join(parts) + "</div>"
    if not standalone:
        return f"<style>{STYLE}</style>{body}"
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>einsat report: {escape(r.name)}</title>"
            f"<style>{PAGE_STYLE}{STYLE}</style></head><body>{body}</body></html>\n")
