"""Pictures of einsat's objects, drawn without system binaries (no graphviz).

- `graph.graph_svg(graph, changed=...)`: a program as a layered DAG (inputs at the top), the
  nodes in `changed` marked; `Graph._repr_svg_` draws it in a notebook.
- `egraph.egraph_svg(data)`: a small e-graph, each e-class a box holding its e-nodes, an edge
  from an e-node to each child e-class; `Session._repr_svg_` draws its current export.
- `regions.differences_svg(diffs)`: PET's corrector's regions on each output's grid
  (`Differences._repr_svg_`).
- `charts`: e-graph growth per phase, per-op cost bars, time per phase (matplotlib, imported
  only when a chart is drawn: `import einsat` stays light, and `runtime`/`gpu` never import it).
- `report.report_html(report, before, after)`: a report as one self-contained HTML page, the
  pictures inline (`Report._repr_html_`, `einsat optimize --report out.html`).

Layering: `svg` and `graph` import `einsat.ir` only (`ir` imports `graph` lazily for its rich
display); `egraph` imports `einsat.egraph.data`; nothing here imports egglog.
"""
