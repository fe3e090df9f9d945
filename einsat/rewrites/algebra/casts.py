"""Cast laws: where a cast sits is a choice (#30 item 2). Every law here is exact.

- A widening cast is exact (every fp16 or bf16 value is an fp32 value, every fp32 value an
  fp64 one), so a cast after it reads the original: cast(cast(x, W), d) = cast(x, d), and
  cast(cast(x, W), dtype(x)) = x. A narrowing cast rounds, and two roundings are not one
  (fp64 → fp32 → fp16 can differ from fp64 → fp16 at ties): no law removes it.
- A cast commutes with a layout op (transpose, reshape): both act element by element, one on
  values, the other on positions.
- Rounding to nearest even is monotone, odd (round(−x) = −round(x)) and keeps 0, so a cast
  between float dtypes commutes with relu and negation (and truncation toward zero, for a cast
  to an integer dtype, is monotone and odd too; only the float pairs are listed).

Casts through arithmetic (cast(a + b) against cast(a) + cast(b)) round differently: those are
bounded, not exact, and are not rules here.

The dtype of a cast the rules create is its attribute (each rule that creates casts carries
the analysis rule dtype(cast(x, d)) = d): the shape analysis seeds the dtype of casts only
where the program is added.
"""

from __future__ import annotations

from einsat.egraph.patterns import apply
from einsat.egraph.rules import Rule, Ruleset, birewrite, rewrite, rule
from einsat.ir.registry import Op
from einsat.rewrites.guards import dtype

FLOATS = ("float16", "bfloat16", "float32", "float64")
# (narrow, wide): every value of `narrow` is a value of `wide`, so the cast to `wide` is exact
WIDENS = (("float16", "float32"), ("bfloat16", "float32"), ("float16", "float64"), ("bfloat16", "float64"),
          ("float32", "float64"))


def q(name: str) -> str:
    """An egglog string literal."""
    return f'"{name}"'


def cast(x: str, d: str) -> str:
    return apply(Op.CAST, x, dtype=d)


def _widen_rules() -> list[Rule]:
    return [
        Rule("cast-widen-narrow", "cast(cast(x, W), dtype(x)) = x  (W holds every value of dtype(x))",
             "\n".join(rewrite(cast(cast("x", q(w)), q(n)), "x", dtype("x", q(n))) for n, w in WIDENS)),
        Rule("cast-widen-cast", "cast(cast(x, W), d) = cast(x, d)  (W holds every value of dtype(x))",
             "\n".join(rewrite(cast(cast("x", q(w)), "d"), cast("x", "d"), dtype("x", q(n))) for n, w in WIDENS)
             + "\n" + _dtype()),
    ]


def _through(op: Op, law: str, **attrs) -> Rule:
    """cast(op(x), d) = op(cast(x, d)) for float x and float d."""
    text = "\n".join(birewrite(cast(apply(op, "x", **attrs), q(d)), apply(op, cast("x", q(d)), **attrs),
                               dtype("x", q(s)))
                     for s in FLOATS for d in FLOATS if s != d)
    return Rule(f"cast-{op.value}", law, text + "\n" + _dtype())


def _dtype() -> str:
    """dtype(cast(x, d)) = d, for the casts a rule creates (with each rule that creates one)."""
    return rule(["(= t " + cast("x", "d") + ")"], ["(set (dtype t) d)"])


def _rules() -> tuple[Rule, ...]:
    """Built on call: the patterns render through `patterns.apply` each time."""
    return (
    *_widen_rules(),
    _through(Op.TRANSPOSE, "cast(transpose(p, x), d) = transpose(p, cast(x, d))", perm="p"),
    _through(Op.RESHAPE, "cast(reshape(s, x), d) = reshape(s, cast(x, d))", shape="s"),
    _through(Op.RELU, "cast(relu(x), d) = relu(cast(x, d))  (floats: rounding is monotone, keeps 0)"),
    _through(Op.NEG, "cast(-x, d) = -cast(x, d)  (floats: rounding to nearest even is odd)"),
    )


def cast_rules() -> Ruleset:
    return Ruleset("casts", _rules(), varying=True)
