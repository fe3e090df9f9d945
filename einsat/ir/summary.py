"""A graph at a glance: inputs, outputs, weights, and a per-op table of counts, FLOPs and bytes.

    print(summarize(graph))

FLOPs and bytes are the registry's counts (`OpDef.flops`, `OpDef.bytes`): a multiply-add is
2 FLOPs; bytes are what each node reads and writes once. Opaque nodes (ONNX ops einsat has
no op for) are listed by ONNX type; their FLOPs are an estimate (one per output element).
"""

from __future__ import annotations

from einsat.ir.graph import Graph
from einsat.ir.registry import Op


def si(value: float, unit: str = "") -> str:
    """1234567 -> '1.23 M' (k, M, G, T)."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}".rstrip()


def op_table(graph: Graph) -> list[tuple[str, int, int, int]]:
    """(op, count, flops, bytes) per op name, most frequent first."""
    rows: dict[str, list[int]] = {}
    for node in graph.nodes:
        ins, outs = graph.node_types(node)
        d = node.definition
        row = rows.setdefault(node.op_name, [0, 0, 0])
        row[0] += 1
        row[1] += d.flops(ins, outs, node.attrs)
        row[2] += d.bytes(ins, outs, node.attrs)
    return sorted(((k, *v) for k, v in rows.items()), key=lambda r: (-r[1], r[0]))


def summarize(graph: Graph, title: str | None = None, cannot_run=()) -> str:
    """The summary as text; `cannot_run`: the opaque nodes nothing can run
    (`runtime.onnx_nodes.unrunnable`), listed apart from those that do run."""
    lines = [title or f"graph {graph.name!r}"]
    inputs = [n for n in graph.inputs if n not in graph.stripped_weights]
    width = max([len(n) for n in (*inputs, *graph.outputs)] + [8])
    for label, names in (("inputs", inputs), ("outputs", graph.outputs)):
        lines.append(f"  {label}:")
        lines += [f"    {n:<{width}}  {graph.types[n]}" for n in names]
    n_values = sum(a.size for a in graph.weights.values())
    n_bytes = sum(a.nbytes for a in graph.weights.values())
    lines.append(f"  weights: {len(graph.weights)} tensors, {si(n_values)} values, {si(n_bytes, 'B')}")
    if graph.stripped_weights:
        types = [graph.types[n] for n in graph.stripped_weights]
        lines.append(f"  stripped weights: {len(types)} tensors, {si(sum(t.size for t in types))} values: inputs "
                     "standing for weights the file does not hold (its einsat.stripped_weights metadata); "
                     "--fill-weights random gives them seeded random values")
    rows = op_table(graph)
    op_width = max([len(r[0]) for r in rows] + [5])
    lines.append(f"  {'op':<{op_width}}  {'count':>6}  {'FLOPs':>10}  {'bytes':>10}")
    for name, count, flops, nbytes in rows:
        lines.append(f"  {name:<{op_width}}  {count:>6}  {si(flops):>10}  {si(nbytes, 'B'):>10}")
    total_flops, total_bytes = sum(r[2] for r in rows), sum(r[3] for r in rows)
    lines.append(f"  {'total':<{op_width}}  {len(graph.nodes):>6}  {si(total_flops):>10}  {si(total_bytes, 'B'):>10}")
    stuck = {n.name for n in cannot_run}
    opaque = sorted({n.attrs["op_type"] for n in graph.nodes if n.op is Op.OPAQUE and n.name not in stuck})
    if opaque:
        lines.append("  opaque (no einsat op; run by onnxruntime, or onnx.reference where onnxruntime lacks it; "
                     f"FLOPs estimated): {', '.join(opaque)}")
    for n in cannot_run:
        domain = n.attrs["domain"] or "ai.onnx"
        lines.append(f"  cannot run: node {n.name!r} ({n.attrs['op_type']}, domain {domain!r}): "
                     "neither onnxruntime nor onnx.reference implements it (einsat.register_onnx_op gives "
                     "it one); einsat optimize refuses the model until then")
    return "\n".join(lines)
