"""Convolution: linearity, bias, batch-norm folding, pooling as convolution.

A convolution is linear in its input and in its weight (bias aside), so sums and scalar
factors move through it; its bias is an add of a broadcast vector. An inference batch norm is a
per-channel affine map, so after a convolution it folds into the weight and bias (the new
weight is a weight-only term: `post.fold` evaluates it at compile time). Average pooling is a
depthwise convolution with a constant kernel 1/(kh*kw) where padding cannot change the count.
"""

from __future__ import annotations

from einsat.egraph.rules import Rule, Ruleset, birewrite, rewrite, rule
from einsat.rewrites.guards import dtype, rank, same_shape, scalar, shape

CONV = "(Conv st pd dl g {x} {w} {b})"


def _ones(n: int) -> str:
    return " ".join(["1"] * n)


def _conv_bias() -> str:
    """conv(x, w, b) = conv(x, w) + reshape(b, [1, F, 1, ...]) for 1 to 3 spatial dims."""
    out = []
    for nsp in (1, 2, 3):
        unbiased = CONV.format(x="x", w="w", b="(Absent)")
        out.append(rewrite(CONV.format(x="x", w="w", b="b"),
                           f"(Add {unbiased} (Reshape (vec-of 1 f {_ones(nsp)}) b))",
                           rank("x", nsp + 2), shape("b", "sb"), "(= 1 (vec-length sb))", "(= f (vec-get sb 0))"))
        out.append(rewrite(f"(Add {unbiased} (Reshape r b))", CONV.format(x="x", w="w", b="b"),
                           rank("x", nsp + 2), rank("b", 1), f"(= r (vec-of 1 (vec-get (shape b) 0) {_ones(nsp)}))"))
    return "\n".join(out)


def _fold_batchnorm() -> str:
    """batchnorm(conv(x, w, b)) = conv(x, w * a, (b - mean) * a + beta), a = scale / sqrt(var + eps)."""
    out = []
    for nsp in (1, 2, 3):
        a = "(Div s (Sqrt (Add v (Fill eps (vec-empty) dt))))"
        w = f"(Mul w (Reshape (vec-of f {_ones(nsp + 1)}) {a}))"
        facts = [rank("x", nsp + 2), dtype("v", "dt"), "(= f (vec-get (shape w) 0))"]
        out.append(rewrite(f"(Batchnorm eps {CONV.format(x='x', w='w', b='(Absent)')} s beta m v)",
                           CONV.format(x="x", w=w, b=f"(Sub beta (Mul m {a}))"), *facts))
        out.append(rewrite(f"(Batchnorm eps {CONV.format(x='x', w='w', b='b')} s beta m v)",
                           CONV.format(x="x", w=w, b=f"(Add (Mul (Sub b m) {a}) beta)"), *facts, rank("b", 1)))
    return "\n".join(out)


def _pool_as_conv() -> str:
    """avgpool(x) = conv(x, 1/(kh*kw), groups=C), when padding is absent or counted (2-D)."""
    kernel = "(Fill (/ 1.0 (to-f64 (* (vec-get k 0) (vec-get k 1)))) (vec-of c 1 (vec-get k 0) (vec-get k 1)) dt)"
    rhs = f"(Conv st pd (vec-of 1 1) c x {kernel} (Absent))"
    facts = ["(= t (Avgpool k st pd ci 0 x))", rank("x", 4), shape("x", "sx"), "(= c (vec-get sx 1))",
             dtype("x", "dt")]
    return (rule(facts + ["(= pd (vec-of 0 0 0 0))"], [f"(union t {rhs})"]) + "\n"
            + rule(facts + ["(= ci 1)"], [f"(union t {rhs})"]))


RULES = (
    Rule("conv-add-input", "conv(a + b, W) = conv(a, W) + conv(b, W)",
         birewrite(f"{CONV.format(x='(Add a b)', w='w', b='(Absent)')}",
                   f"(Add {CONV.format(x='a', w='w', b='(Absent)')} {CONV.format(x='b', w='w', b='(Absent)')})",
                   same_shape("a", "b"))),
    Rule("conv-add-weight", "conv(x, W1) + conv(x, W2) = conv(x, W1 + W2)",
         birewrite(f"(Add {CONV.format(x='x', w='w1', b='(Absent)')} {CONV.format(x='x', w='w2', b='(Absent)')})",
                   CONV.format(x="x", w="(Add w1 w2)", b="(Absent)"), same_shape("w1", "w2"))),
    Rule("conv-scalar", "conv(s * x, W) = s * conv(x, W) for a scalar s",
         birewrite(CONV.format(x="(Mul s x)", w="w", b="(Absent)"),
                   f"(Mul s {CONV.format(x='x', w='w', b='(Absent)')})", scalar("s"))),
    Rule("conv-bias", "conv(x, W, b) = conv(x, W) + b (broadcast over channels)", _conv_bias()),
    Rule("conv-batchnorm",
         "batchnorm(conv(x, W, b)) = conv(x, W * a, (b - mean) * a + beta), a = scale / sqrt(var + eps)",
         _fold_batchnorm()),
    Rule("avgpool-as-conv", "avgpool(x) = depthwise conv(x, 1 / (kh * kw))  (padding absent or counted)",
         _pool_as_conv()),
    Rule("global-avgpool-reduce", "global_avgpool(x) = reduce_mean(x, spatial axes)",
         birewrite("(GlobalAvgpool x)", "(ReduceMean (vec-of 2 3) 1 x)", rank("x", 4))),
    Rule("conv-concat-input", "conv(concat(a, b), W) = conv(a, W[:, :Ca]) + conv(b, W[:, Ca:])  (channels)",
         rule([f"(= t {CONV.format(x='(Concat 1 [a b])', w='w', b='(Absent)')})", "(= g 1)",
               shape("a", "sa"), shape("b", "sb")],
              ["(let ws (Split 1 (vec-of (vec-get sa 1) (vec-get sb 1)) w))",
               f"(union t (Add {CONV.format(x='a', w='(Get ws 0)', b='(Absent)')}"
               f" {CONV.format(x='b', w='(Get ws 1)', b='(Absent)')}))"])),
)


def conv_rules() -> Ruleset:
    return Ruleset("conv", RULES, varying=True)
