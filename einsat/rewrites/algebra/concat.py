"""Concat and split: their geometry, and concat commuting with the ops it can pass through.

Concatenating the results of one op applied to several inputs is applying the op once to the
concatenated inputs, whenever the op treats the concatenated axis independently: element-wise
ops (operands of equal shapes), activations, a matmul's free dims, a convolution's output
channels (weights concatenated) or batch, pooling's channels and batch. Read left to right these
laws make one large op out of several small ones (TASO's and Tensat's main source of speed).
"""

from __future__ import annotations

from einsat.egraph.rules import Rule, Ruleset, birewrite, rewrite, rule
from einsat.rewrites.algebra.layout import BINARY, UNARY
from einsat.rewrites.guards import rank, same_shape, shape

CONV = "(Conv st pd dl g {x} {w} {b})"


def _split_rules() -> tuple[Rule, ...]:
    return (
        Rule("split-concat", "split(concat(a, b), [|a|, |b|]) = (a, b)",
             rule(["(= m (Split ax n (Concat ax [a b])))", "(= 2 (vec-length n))",
                   "(= (vec-get n 0) (vec-get (shape a) ax))"],
                  ["(union (Get m 0) a)", "(union (Get m 1) b)"])),
        Rule("concat-split", "concat(split(x, [n0, n1])) = x",
             rewrite("(Concat ax [(Get (Split ax n x) 0) (Get (Split ax n x) 1)])", "x", "(= 2 (vec-length n))")),
        Rule("concat-flatten", "concat(concat(a, b), c) = concat(a, b, c) = concat(a, concat(b, c))",
             rewrite("(Concat ax [(Concat ax [a b]) c])", "(Concat ax [a b c])") + "\n"
             + rewrite("(Concat ax [a (Concat ax [b c])])", "(Concat ax [a b c])")),
        Rule("split-split", "split(split(x, [n0, n1])[0], [m0, m1]) = split(x, [m0, m1, n1])[:2]",
             rule(["(= inner (Split ax n x))", "(= m (Split ax k (Get inner 0)))", "(= 2 (vec-length n))",
                   "(= 2 (vec-length k))"],
                  ["(let whole (Split ax (vec-push k (vec-get n 1)) x))",
                   "(union (Get m 0) (Get whole 0))", "(union (Get m 1) (Get whole 1))",
                   "(union (Get inner 1) (Get whole 2))"])),
    )


def _elementwise_rules() -> list[Rule]:
    out = []
    for op, sym in BINARY.items():
        out.append(Rule(
            f"concat-{op.lower()}", f"concat(a {sym} b, c {sym} d) = concat(a, c) {sym} concat(b, d)  (a~b, c~d)",
            birewrite(f"(Concat ax [({op} a b) ({op} c d)])", f"({op} (Concat ax [a c]) (Concat ax [b d]))",
                      same_shape("a", "b"), same_shape("c", "d"))))
    for op, attrs in UNARY.items():
        out.append(Rule(
            f"concat-{op.lower()}", f"concat({op.lower()}(a), {op.lower()}(b)) = {op.lower()}(concat(a, b))",
            birewrite(f"(Concat ax [({op} {attrs}a) ({op} {attrs}b)])", f"({op} {attrs}(Concat ax [a b]))")))
    return out


def _product_rules() -> tuple[Rule, ...]:
    conv = CONV.format
    return (
        Rule("concat-matmul-rows", "concat(A @ W, B @ W) = concat(A, B) @ W  (rows)",
             rewrite("(Concat ax [(Matmul a w) (Matmul b w)])", "(Matmul (Concat ax [a b]) w)",
                     rank("w", 2), shape("a", "sa"), "(= ax (- (vec-length sa) 2))")),
        Rule("concat-matmul-cols", "concat(A @ B, A @ C) = A @ concat(B, C)  (columns)",
             rewrite("(Concat ax [(Matmul a b) (Matmul a c)])", "(Matmul a (Concat 1 [b c]))",
                     rank("b", 2), rank("c", 2), shape("a", "sa"), "(= ax (- (vec-length sa) 1))")),
        Rule("concat-conv-channels",
             "concat(conv(x, W1, b1), conv(x, W2, b2)) = conv(x, concat(W1, W2), concat(b1, b2))",
             rewrite(f"(Concat 1 [{conv(x='x', w='w1', b='(Absent)')} {conv(x='x', w='w2', b='(Absent)')}])",
                     conv(x="x", w="(Concat 0 [w1 w2])", b="(Absent)"), "(= g 1)", _same_kernel()) + "\n"
             + rewrite(f"(Concat 1 [{conv(x='x', w='w1', b='b1')} {conv(x='x', w='w2', b='b2')}])",
                       conv(x="x", w="(Concat 0 [w1 w2])", b="(Concat 0 [b1 b2])"), "(= g 1)", _same_kernel(),
                       rank("b1", 1), rank("b2", 1))),
        Rule("concat-conv-batch", "concat(conv(a, W), conv(b, W)) = conv(concat(a, b), W)  (batch)",
             birewrite(f"(Concat 0 [{conv(x='a', w='w', b='bias')} {conv(x='b', w='w', b='bias')}])",
                       conv(x="(Concat 0 [a b])", w="w", b="bias"))),
        Rule("concat-maxpool", "concat(maxpool(a), maxpool(b)) = maxpool(concat(a, b))  (batch or channels)",
             birewrite("(Concat ax [(Maxpool k st pd dl c a) (Maxpool k st pd dl c b)])",
                       "(Maxpool k st pd dl c (Concat ax [a b]))", "(<= ax 1)")),
        Rule("concat-avgpool", "concat(avgpool(a), avgpool(b)) = avgpool(concat(a, b))  (batch or channels)",
             birewrite("(Concat ax [(Avgpool k st pd ci c a) (Avgpool k st pd ci c b)])",
                       "(Avgpool k st pd ci c (Concat ax [a b]))", "(<= ax 1)")),
        Rule("concat-global-avgpool", "concat(gap(a), gap(b)) = gap(concat(a, b))  (batch or channels)",
             birewrite("(Concat ax [(GlobalAvgpool a) (GlobalAvgpool b)])", "(GlobalAvgpool (Concat ax [a b]))",
                       "(<= ax 1)")),
    )


def _same_kernel() -> str:
    """w1 and w2 differ only in their output channels."""
    return "(= (vec-set (shape w1) 0 0) (vec-set (shape w2) 0 0))"


RULES = _split_rules() + tuple(_elementwise_rules()) + _product_rules()


def concat_rules() -> Ruleset:
    return Ruleset("concat", RULES, varying=True)
