"""`builder_code(graph)`: Python source that rebuilds `graph` with `GraphBuilder`, exactly.

Weights are written out bit for bit (small ones as literals, larger ones as hex bytes), so the
printed program reproduces a failure without the seed that drew it.
"""

from __future__ import annotations

import keyword
import re

import numpy as np

from einsat.ir.graph import Graph
from einsat.ir.registry import REQUIRED

LITERAL_LIMIT = 16  # elements written as a list literal; more are written as hex bytes


def array_code(a: np.ndarray) -> str:
    a = np.asarray(a)
    dt = f"np.{a.dtype.name}"
    if a.size <= LITERAL_LIMIT:
        values = [float(v) if a.dtype.kind == "f" else int(v) if a.dtype.kind in "iu" else bool(v)
                  for v in a.reshape(-1)]
        body = f"np.array({values!r}, dtype={dt})"
    else:
        body = f"np.frombuffer(bytes.fromhex({a.tobytes().hex()!r}), dtype={dt})"
    return body if a.ndim == 1 else f"{body}.reshape({tuple(a.shape)!r})"


def _value_code(v) -> str:
    if isinstance(v, np.ndarray):
        return array_code(v)
    return repr(v)


class _Names:
    def __init__(self):
        self.used: set[str] = {"b", "np", "graph", "GraphBuilder"}
        self.of: dict[str, str] = {}

    def __call__(self, value: str) -> str:
        if value not in self.of:
            base = re.sub(r"\W", "_", value) or "v"
            if base[0].isdigit() or keyword.iskeyword(base):
                base = "v_" + base
            name, k = base, 1
            while name in self.used:
                k += 1
                name = f"{base}_{k}"
            self.used.add(name)
            self.of[value] = name
        return self.of[value]


def builder_code(graph: Graph) -> str:
    """Source code that builds `graph` again and binds it to `graph`."""
    ident = _Names()
    lines = ["import numpy as np", "", "from einsat import GraphBuilder", "",
             f"b = GraphBuilder({graph.name!r})"]
    for name in graph.inputs:
        t = graph.types[name]
        lines.append(f"{ident(name)} = b.input({name!r}, {tuple(t.shape)!r}, np.{t.dtype.name})")
    for name, value in graph.weights.items():
        lines.append(f"{ident(name)} = b.weight({name!r}, {array_code(value)})")
    for node in graph.nodes:
        spec = node.definition.attrs
        args = [ident(i) if i else "None" for i in node.inputs]
        for k, v in node.attrs.items():
            default = spec[k].default if k in spec else REQUIRED
            if default is REQUIRED or isinstance(v, np.ndarray) or v != default:
                args.append(f"{k}={_value_code(v)}")
        outs = node.outputs
        if len(outs) == 1:
            args.append(f"name={outs[0]!r}")
        elif all(o == f"{node.name}_{k}" for k, o in enumerate(outs)):
            args.append(f"name={node.name!r}")
        target = ident(outs[0]) if len(outs) == 1 else ", ".join(ident(o) for o in outs)
        lines.append(f"{target} = b.{node.op.value}({', '.join(args)})")
    outs = ", ".join(ident(o) for o in graph.outputs)
    lines.append(f"graph = b.build({outs})")
    return "\n".join(lines) + "\n"


def rebuild(code: str) -> Graph:
    """Run `builder_code` output and return the graph it builds."""
    scope: dict = {}
    exec(compile(code, "<builder_code>", "exec"), scope)  # noqa: S102  (our own generated code)
    return scope["graph"]
