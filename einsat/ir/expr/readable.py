"""A readable one-line form of expressions, for notebooks, reports and messages:

    L[i0∈[0,2),i1∈[0,8)] Σ[s0∈[0,3)] (T0[i0, s0] * T1[s0, i1])

(canonical names, as the printer gives them; `{...}` is a scope).
"""

from __future__ import annotations

from einsat.ir.expr.index import Index
from einsat.ir.expr.nodes import Body, Const, Expr, Guard, Read
from einsat.ir.expr.printer import canonical


def show(e: Expr) -> str:
    """A readable one-line form for notebooks and messages: L_{i0∈[0,2),...} Σ_{...} body."""
    e, _ = canonical(e)
    loops = ",".join(f"{it.name}∈[{it.lo},{it.hi})" for it in e.loops)
    sums = ",".join(f"{it.name}∈[{it.lo},{it.hi})" for it in e.sums)
    red = "Σ" if e.reduce == "sum" else "max"
    return f"L[{loops}] {red + '[' + sums + '] ' if sums else ''}{_show_body(e.body)}"


def _show_body(body: Body) -> str:
    if isinstance(body, Read):
        src = f"T{body.src}" if isinstance(body.src, int) else "{" + show(body.src) + "}"
        return f"{src}[{', '.join(_show_index(i) for i in body.idx)}]"
    if isinstance(body, Const):
        return repr(float(body.value))
    if isinstance(body, Guard):
        return f"({_show_body(body.value)} if {body.lo}<={_show_index(body.idx)}<{body.hi})"
    ops = {"add": " + ", "sub": " - ", "mul": " * ", "div": " / "}
    if body.fn in ops:
        return "(" + ops[body.fn].join(_show_body(a) for a in body.args) + ")"
    return f"{body.fn}({', '.join(_show_body(a) for a in body.args)})"


def _show_index(i: Index) -> str:
    parts = []
    for a, c in i.terms:
        atom = a if isinstance(a, str) else f"({_show_index(a.arg)}{'//' if a.kind == '/' else '%'}{a.q})"
        parts.append(atom if c == 1 else f"-{atom}" if c == -1 else f"{c}{atom}")
    if i.const or not parts:
        parts.append(str(i.const))
    return "+".join(parts).replace("+-", "-")
