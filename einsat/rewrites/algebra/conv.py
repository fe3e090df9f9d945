"""Convolution: linearity, bias, batch-norm folding, pooling as convolution.

A convolution is linear in its input and in its weight (bias aside), so sums and scalar
factors move through it; its bias is an add of a broadcast vector. An inference batch norm is a
per-channel affine map, so after a convolution it folds into the weight and bias (the new
weight is a weight-only term: `post.fold` evaluates it at compile time). Average pooling is a
depthwise convolution with a constant kernel 1/(kh*kw) where padding cannot change the count.
"""

from __future__ import annotations

from einsat.egraph.patterns import NO_INPUT, pat
from einsat.egraph.rules import Rule, Ruleset, birewrite, rewrite, rule
from einsat.rewrites.guards import dtype, rank, same_shape, scalar, shape

# one convolution's attributes, bound to the same variables on both sides of a rule
ATTRS = {"stride": "st", "padding": "pd", "dilation": "dl", "groups": "g"}


def conv(x: str, w: str, b: str = NO_INPUT, **attrs: str) -> str:
    """conv(x, w, b) with its attributes bound to `ATTRS`' variables (or to `attrs`)."""
    return pat.conv(x, w, b, **{**ATTRS, **attrs})


def _ones(n: int) -> str:
    return " ".join(["1"] * n)


def _conv_bias() -> str:
    """conv(x, w, b) = conv(x, w) + reshape(b, [1, F, 1, ...]) for 1 to 3 spatial dims."""
    out = []
    for nsp in (1, 2, 3):
        unbiased = conv("x", "w")
        broadcast = pat.reshape("b", shape=f"(vec-of 1 f {_ones(nsp)})")
        out.append(rewrite(conv("x", "w", "b"), f"(Add {unbiased} {broadcast})",
                           rank("x", nsp + 2), shape("b", "sb"), "(= 1 (vec-length sb))", "(= f (vec-get sb 0))"))
        out.append(rewrite(f"(Add {unbiased} {pat.reshape('b', shape='r')})", conv("x", "w", "b"),
                           rank("x", nsp + 2), rank("b", 1), f"(= r (vec-of 1 (vec-get (shape b) 0) {_ones(nsp)}))"))
    return "\n".join(out)


def _fold_batchnorm() -> str:
    """batchnorm(conv(x, w, b)) = conv(x, w * a, (b - mean) * a + beta), a = scale / sqrt(var + eps)."""
    out = []
    for nsp in (1, 2, 3):
        a = "(Div s (Sqrt (Add v (Fill eps (vec-empty) dt))))"
        w = f"(Mul w {pat.reshape(a, shape=f'(vec-of f {_ones(nsp + 1)})')})"
        facts = [rank("x", nsp + 2), dtype("v", "dt"), "(= f (vec-get (shape w) 0))"]
        out.append(rewrite(pat.batchnorm(conv("x", "w"), "s", "beta", "m", "v", epsilon="eps"),
                           conv("x", w, f"(Sub beta (Mul m {a}))"), *facts))
        out.append(rewrite(pat.batchnorm(conv("x", "w", "b"), "s", "beta", "m", "v", epsilon="eps"),
                           conv("x", w, f"(Add (Mul (Sub b m) {a}) beta)"), *facts, rank("b", 1)))
    return "\n".join(out)


def _pool_as_conv() -> str:
    """avgpool(x) = conv(x, 1/(kh*kw), groups=C), when padding is absent or counted (2-D)."""
    kernel = "(Fill (/ 1.0 (to-f64 (* (vec-get k 0) (vec-get k 1)))) (vec-of c 1 (vec-get k 0) (vec-get k 1)) dt)"
    rhs = conv("x", kernel, dilation=(1, 1), groups="c")
    pool = pat.avgpool("x", kernel="k", stride="st", padding="pd", count_include_pad="ci", ceil_mode=0)
    facts = [f"(= t {pool})", rank("x", 4), shape("x", "sx"), "(= c (vec-get sx 1))", dtype("x", "dt")]
    return (rule(facts + ["(= pd (vec-of 0 0 0 0))"], [f"(union t {rhs})"]) + "\n"
            + rule(facts + ["(= ci 1)"], [f"(union t {rhs})"]))


def _rules() -> tuple[Rule, ...]:
    return (
        Rule("conv-add-input", "conv(a + b, W) = conv(a, W) + conv(b, W)",
             birewrite(conv("(Add a b)", "w"), f"(Add {conv('a', 'w')} {conv('b', 'w')})", same_shape("a", "b"))),
        Rule("conv-add-weight", "conv(x, W1) + conv(x, W2) = conv(x, W1 + W2)",
             birewrite(f"(Add {conv('x', 'w1')} {conv('x', 'w2')})", conv("x", "(Add w1 w2)"), same_shape("w1", "w2"))),
        Rule("conv-scalar", "conv(s * x, W) = s * conv(x, W) for a scalar s",
             birewrite(conv("(Mul s x)", "w"), f"(Mul s {conv('x', 'w')})", scalar("s"))),
        Rule("conv-bias", "conv(x, W, b) = conv(x, W) + b (broadcast over channels)", _conv_bias()),
        Rule("conv-batchnorm",
             "batchnorm(conv(x, W, b)) = conv(x, W * a, (b - mean) * a + beta), a = scale / sqrt(var + eps)",
             _fold_batchnorm()),
        Rule("avgpool-as-conv", "avgpool(x) = depthwise conv(x, 1 / (kh * kw))  (padding absent or counted)",
             _pool_as_conv()),
        Rule("global-avgpool-reduce", "global_avgpool(x) = reduce_mean(x, spatial axes)",
             birewrite("(GlobalAvgpool x)", pat.reduce_mean("x", axes=(2, 3), keepdims=1), rank("x", 4))),
        Rule("conv-concat-input", "conv(concat(a, b), W) = conv(a, W[:, :Ca]) + conv(b, W[:, Ca:])  (channels)",
             rule([f"(= t {conv(pat.concat('a', 'b', axis=1), 'w')})", "(= g 1)", shape("a", "sa"), shape("b", "sb")],
                  [f"(let ws {pat.split('w', axis=1, sizes='(vec-of (vec-get sa 1) (vec-get sb 1))')})",
                   f"(union t (Add {conv('a', '(Get ws 0)')} {conv('b', '(Get ws 1)')}))"])),
    )


def conv_rules() -> Ruleset:
    return Ruleset("conv", _rules(), varying=True)
