"""Layout laws: transposes and reshapes commute with element-wise ops; views are reshapes.

A layout op only moves data, so it commutes with any op that treats every element alike: a
unary activation, or a binary op whose operands have the same shape (with broadcasting the
operands would need different layout ops). A scalar factor passes through any layout op.
Flatten, squeeze and unsqueeze are reshapes to their output shape.
"""

from __future__ import annotations

from einsat.egraph.encoding import ctor_name
from einsat.egraph.patterns import apply, pat
from einsat.egraph.rules import Rule, Ruleset, birewrite, rule
from einsat.ir.registry import REGISTRY, Op
from einsat.rewrites.guards import same_shape, scalar

BINARY = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/"}
# the unary element-wise ops the registry flags `layout_commutes`, each with its attributes bound to
# variables named by their first two letters (the same on both sides of a rule)
UNARY = {op: {name: name[:2] for name in d.attrs} for op, d in REGISTRY.items() if d.layout_commutes}


def _layouts():
    """The theory's two layout ops, each with its one attribute bound to a variable, and its law
    (flatten, squeeze and unsqueeze are reshapes by `_view_rules`)."""
    yield Op.TRANSPOSE, {"perm": "p"}, "transpose(p, {})"
    yield Op.RESHAPE, {"shape": "s"}, "reshape(s, {})"


def unary(op: Op, x: str) -> str:
    return apply(op, x, **UNARY[op])


def _layout(op: Op, x: str) -> str:
    return apply(op, x, **next(b for o, b, _ in _layouts() if o is op))


def _binary_rules() -> list[Rule]:
    out = []
    for layout, _, law in _layouts():
        for op, sym in BINARY.items():
            out.append(Rule(
                f"{layout.value}-{op.lower()}",
                f"{law.format(f'a {sym} b')} = {law.format('a')} {sym} {law.format('b')}  (same shapes)",
                birewrite(_layout(layout, f"({op} a b)"), f"({op} {_layout(layout, 'a')} {_layout(layout, 'b')})",
                          same_shape("a", "b"))))
    return out


def _unary_rules() -> list[Rule]:
    out = []
    for layout, _, law in _layouts():
        for op in UNARY:
            name = ctor_name(op).lower()
            out.append(Rule(
                f"{layout.value}-{name}", f"{law.format(f'{name}(x)')} = {name}({law.format('x')})",
                birewrite(_layout(layout, unary(op, "x")), unary(op, _layout(layout, "x")))))
    return out


def _view_rules() -> tuple[Rule, ...]:
    return (
        Rule("transpose-scalar", "transpose(p, s * x) = s * transpose(p, x) for a scalar s",
             birewrite(pat.transpose("(Mul s x)", perm="p"), f"(Mul s {pat.transpose('x', perm='p')})", scalar("s"))),
        Rule("reshape-scalar", "reshape(n, s * x) = s * reshape(n, x) for a scalar s",
             birewrite(pat.reshape("(Mul s x)", shape="n"), f"(Mul s {pat.reshape('x', shape='n')})", scalar("s"))),
        Rule("flatten-reshape", "flatten(x) = reshape(x, shape(flatten(x)))",
             rule([f"(= t {pat.flatten('x')})", "(= s (shape t))"], [f"(union t {pat.reshape('x', shape='s')})"])),
        Rule("squeeze-reshape", "squeeze(x) = reshape(x, shape(squeeze(x)))",
             rule([f"(= t {pat.squeeze('x')})", "(= s (shape t))"], [f"(union t {pat.reshape('x', shape='s')})"])),
        Rule("unsqueeze-reshape", "unsqueeze(x) = reshape(x, shape(unsqueeze(x)))",
             rule([f"(= t {pat.unsqueeze('x')})", "(= s (shape t))"], [f"(union t {pat.reshape('x', shape='s')})"])),
    )


def layout_rules() -> Ruleset:
    return Ruleset("layout", tuple(_binary_rules() + _unary_rules()) + _view_rules(), varying=True)
