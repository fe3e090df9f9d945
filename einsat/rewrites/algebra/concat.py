"""Concat and split: their geometry, and concat commuting with the ops it can pass through.

Concatenating the results of one op applied to several inputs is applying the op once to the
concatenated inputs, whenever the op treats the concatenated axis independently: element-wise
ops (operands of equal shapes), activations, a matmul's free dims, a convolution's output
channels (weights concatenated) or batch, pooling's channels and batch. Read left to right these
laws make one large op out of several small ones (TASO's and Tensat's main source of speed).
"""

from __future__ import annotations

from einsat.egraph.encoding import ctor_name
from einsat.egraph.patterns import pat
from einsat.egraph.rules import Rule, Ruleset, birewrite, rewrite, rule
from einsat.rewrites.algebra.conv import conv
from einsat.rewrites.algebra.layout import BINARY, UNARY, unary
from einsat.rewrites.guards import rank, same_shape, shape


def cat(*xs: str, axis="ax") -> str:
    return pat.concat(*xs, axis=axis)


def split(x: str, sizes: str = "n") -> str:
    return pat.split(x, axis="ax", sizes=sizes)


def _split_rules() -> tuple[Rule, ...]:
    return (
        Rule("split-concat", "split(concat(a, b), [|a|, |b|]) = (a, b)",
             rule([f"(= m {split(cat('a', 'b'))})", "(= 2 (vec-length n))",
                   "(= (vec-get n 0) (vec-get (shape a) ax))"],
                  ["(union (Get m 0) a)", "(union (Get m 1) b)"])),
        Rule("concat-split", "concat(split(x, [n0, n1])) = x",
             rewrite(cat(f"(Get {split('x')} 0)", f"(Get {split('x')} 1)"), "x", "(= 2 (vec-length n))")),
        Rule("concat-flatten", "concat(concat(a, b), c) = concat(a, b, c) = concat(a, concat(b, c))",
             rewrite(cat(cat("a", "b"), "c"), cat("a", "b", "c")) + "\n"
             + rewrite(cat("a", cat("b", "c")), cat("a", "b", "c"))),
        Rule("split-split", "split(split(x, [n0, n1])[0], [m0, m1]) = split(x, [m0, m1, n1])[:2]",
             rule([f"(= inner {split('x')})", f"(= m {split('(Get inner 0)', 'k')})", "(= 2 (vec-length n))",
                   "(= 2 (vec-length k))"],
                  [f"(let whole {split('x', '(vec-push k (vec-get n 1))')})",
                   "(union (Get m 0) (Get whole 0))", "(union (Get m 1) (Get whole 1))",
                   "(union (Get inner 1) (Get whole 2))"])),
    )


def _elementwise_rules() -> list[Rule]:
    out = []
    for op, sym in BINARY.items():
        out.append(Rule(
            f"concat-{op.lower()}", f"concat(a {sym} b, c {sym} d) = concat(a, c) {sym} concat(b, d)  (a~b, c~d)",
            birewrite(cat(f"({op} a b)", f"({op} c d)"), f"({op} {cat('a', 'c')} {cat('b', 'd')})",
                      same_shape("a", "b"), same_shape("c", "d"))))
    for op in UNARY:
        name = ctor_name(op).lower()
        out.append(Rule(
            f"concat-{name}", f"concat({name}(a), {name}(b)) = {name}(concat(a, b))",
            birewrite(cat(unary(op, "a"), unary(op, "b")), unary(op, cat("a", "b")))))
    return out


def _product_rules() -> tuple[Rule, ...]:
    def pool(kind: str, x: str) -> str:  # pooling with its attributes bound to k st pd dl|ci c
        third = {"maxpool": {"dilation": "dl"}, "avgpool": {"count_include_pad": "ci"}}[kind]
        return getattr(pat, kind)(x, kernel="k", stride="st", padding="pd", ceil_mode="c", **third)

    return (
        Rule("concat-matmul-rows", "concat(A @ W, B @ W) = concat(A, B) @ W  (rows)",
             rewrite(cat("(Matmul a w)", "(Matmul b w)"), f"(Matmul {cat('a', 'b')} w)",
                     rank("w", 2), shape("a", "sa"), "(= ax (- (vec-length sa) 2))")),
        Rule("concat-matmul-cols", "concat(A @ B, A @ C) = A @ concat(B, C)  (columns)",
             rewrite(cat("(Matmul a b)", "(Matmul a c)"), f"(Matmul a {cat('b', 'c', axis=1)})",
                     rank("b", 2), rank("c", 2), shape("a", "sa"), "(= ax (- (vec-length sa) 1))")),
        Rule("concat-conv-channels",
             "concat(conv(x, W1, b1), conv(x, W2, b2)) = conv(x, concat(W1, W2), concat(b1, b2))",
             rewrite(cat(conv("x", "w1"), conv("x", "w2"), axis=1),
                     conv("x", cat("w1", "w2", axis=0)), "(= g 1)", _same_kernel()) + "\n"
             + rewrite(cat(conv("x", "w1", "b1"), conv("x", "w2", "b2"), axis=1),
                       conv("x", cat("w1", "w2", axis=0), cat("b1", "b2", axis=0)), "(= g 1)", _same_kernel(),
                       rank("b1", 1), rank("b2", 1))),
        Rule("concat-conv-batch", "concat(conv(a, W), conv(b, W)) = conv(concat(a, b), W)  (batch)",
             birewrite(cat(conv("a", "w", "bias"), conv("b", "w", "bias"), axis=0),
                       conv(cat("a", "b", axis=0), "w", "bias"))),
        Rule("concat-maxpool", "concat(maxpool(a), maxpool(b)) = maxpool(concat(a, b))  (batch or channels)",
             birewrite(cat(pool("maxpool", "a"), pool("maxpool", "b")), pool("maxpool", cat("a", "b")), "(<= ax 1)")),
        Rule("concat-avgpool", "concat(avgpool(a), avgpool(b)) = avgpool(concat(a, b))  (batch or channels)",
             birewrite(cat(pool("avgpool", "a"), pool("avgpool", "b")), pool("avgpool", cat("a", "b")), "(<= ax 1)")),
        Rule("concat-global-avgpool", "concat(gap(a), gap(b)) = gap(concat(a, b))  (batch or channels)",
             birewrite(cat("(GlobalAvgpool a)", "(GlobalAvgpool b)"), f"(GlobalAvgpool {cat('a', 'b')})",
                       "(<= ax 1)")),
    )


def _same_kernel() -> str:
    """w1 and w2 differ only in their output channels."""
    return "(= (vec-set (shape w1) 0 0) (vec-set (shape w2) 0 0))"


def concat_rules() -> Ruleset:
    return Ruleset("concat", _split_rules() + tuple(_elementwise_rules()) + _product_rules(), varying=True)
