"""Layout laws: transposes and reshapes commute with element-wise ops; views are reshapes.

A layout op only moves data, so it commutes with any op that treats every element alike: a
unary activation, or a binary op whose operands have the same shape (with broadcasting the
operands would need different layout ops). A scalar factor passes through any layout op.
Flatten, squeeze and unsqueeze are reshapes to their output shape.
"""

from __future__ import annotations

from einsat.egraph.rules import Rule, Ruleset, birewrite, rule
from einsat.rewrites.guards import same_shape, scalar

BINARY = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/"}
# unary element-wise ops, with the attribute slots their constructor takes first
UNARY = {"Relu": "", "Sigmoid": "", "Tanh": "", "Erf": "", "Exp": "", "Sqrt": "", "Neg": "",
         "Gelu": "ap ", "LeakyRelu": "al "}
LAYOUT = {"Transpose": "transpose(p, {})", "Reshape": "reshape(s, {})"}


def _binary_rules() -> list[Rule]:
    out = []
    for layout, law in LAYOUT.items():
        v = "p" if layout == "Transpose" else "s"
        for op, sym in BINARY.items():
            out.append(Rule(
                f"{layout.lower()}-{op.lower()}",
                f"{law.format(f'a {sym} b')} = {law.format('a')} {sym} {law.format('b')}  (same shapes)",
                birewrite(f"({layout} {v} ({op} a b))", f"({op} ({layout} {v} a) ({layout} {v} b))",
                          same_shape("a", "b"))))
    return out


def _unary_rules() -> list[Rule]:
    out = []
    for layout, law in LAYOUT.items():
        v = "p" if layout == "Transpose" else "s"
        for op, attrs in UNARY.items():
            out.append(Rule(
                f"{layout.lower()}-{op.lower()}",
                f"{law.format(f'{op.lower()}(x)')} = {op.lower()}({law.format('x')})",
                birewrite(f"({layout} {v} ({op} {attrs}x))", f"({op} {attrs}({layout} {v} x))")))
    return out


RULES = tuple(_binary_rules() + _unary_rules()) + (
    Rule("transpose-scalar", "transpose(p, s * x) = s * transpose(p, x) for a scalar s",
         birewrite("(Transpose p (Mul s x))", "(Mul s (Transpose p x))", scalar("s"))),
    Rule("reshape-scalar", "reshape(n, s * x) = s * reshape(n, x) for a scalar s",
         birewrite("(Reshape n (Mul s x))", "(Mul s (Reshape n x))", scalar("s"))),
    Rule("flatten-reshape", "flatten(x) = reshape(x, shape(flatten(x)))",
         rule(["(= t (Flatten _ x))", "(= s (shape t))"], ["(union t (Reshape s x))"])),
    Rule("squeeze-reshape", "squeeze(x) = reshape(x, shape(squeeze(x)))",
         rule(["(= t (Squeeze _ x))", "(= s (shape t))"], ["(union t (Reshape s x))"])),
    Rule("unsqueeze-reshape", "unsqueeze(x) = reshape(x, shape(unsqueeze(x)))",
         rule(["(= t (Unsqueeze _ x))", "(= s (shape t))"], ["(union t (Reshape s x))"])),
)


def layout_rules() -> Ruleset:
    return Ruleset("layout", RULES, varying=True)
