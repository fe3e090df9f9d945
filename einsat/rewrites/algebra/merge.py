"""Merging parallel ops that share an input (Tensat's multi-pattern rules).

Two matmuls `A @ B`, `A @ C` anywhere in the program become one `A @ concat(B, C)` whose output
is split back; two convolutions of one input likewise, with their weights (and biases)
concatenated along the output channels. A convolution whose kernel is smaller than another
one's on the same input is enlarged with zeros (and padded more) so that the two can merge
(TASO's enlarge rule). The `merge-siblings` generator merges all n >= 3 such siblings at once
(BERT's Q, K and V; an RNN cell's gates; an Inception module's 1x1 branches).

Growth is bounded as in Tensat: the rules run only in the first steps of saturation, under
their own budget (`first_steps`); they merge only values of the source program (`ord`), each
pair once in `ord` order, over weights (`const`): a merged product never merges again, and
computed operands (e.g. `x @ (Wq @ K^T)` after reassociation) never merge.
"""

from __future__ import annotations

from einsat.egraph.data import ABSENT, EGraphData
from einsat.egraph.patterns import NO_INPUT, pat
from einsat.egraph.rules import Generator, Rule, Ruleset, rule
from einsat.egraph.terms import Term
from einsat.egraph.weights import weight_only
from einsat.ir.registry import Op
from einsat.rewrites.algebra.conv import conv
from einsat.rewrites.guards import rank, shape

ORDERED = "(= o1 (ord t1)) (= o2 (ord t2)) (< o1 o2)"


def _merge_conv(bias: bool) -> str:
    b1, b2 = ("b1", "b2") if bias else (NO_INPUT, NO_INPUT)
    merged_bias = pat.concat("b1", "b2", axis=0) if bias else NO_INPUT
    facts = [f"(= t1 {conv('x', 'w1', b1)})", f"(= t2 {conv('x', 'w2', b2)})", ORDERED,
             "(const w1)", "(const w2)", "(= g 1)", shape("w1", "s1"), shape("w2", "s2"),
             "(= (vec-set s1 0 0) (vec-set s2 0 0))"] + ([rank("b1", 1), rank("b2", 1)] if bias else [])
    merged = conv("x", pat.concat("w1", "w2", axis=0), merged_bias)
    return rule(facts, [f"(let m {pat.split(merged, axis=1, sizes='(vec-of (vec-get s1 0) (vec-get s2 0))')})",
                        "(union t1 (Get m 0))", "(union t2 (Get m 1))"])


def _enlarge() -> str:
    """conv(x, w1) with a kernel smaller than w2's, both 'same'-padded: pad w1 with zeros."""
    d = ["(/ (- (vec-get s2 2) (vec-get s1 2)) 2)", "(/ (- (vec-get s2 3) (vec-get s1 3)) 2)"]
    pads = f"(vec-of 0 0 {d[0]} {d[1]} 0 0 {d[0]} {d[1]})"
    zero_padded = pat.pad("w1", pads=pads, mode='"constant"', value="0.0")
    return rule(
        [f"(= t1 {conv('x', 'w1', 'b1', padding='p1', groups=1)})",
         f"(= t2 {conv('x', 'w2', 'b2', padding='p2', groups=1)})", "(ord t1)", "(ord t2)",
         "(const w1)", "(const w2)", rank("w1", 4), rank("w2", 4), shape("w1", "s1"), shape("w2", "s2"),
         "(= dl (vec-of 1 1))", "(<= (vec-get s1 2) (vec-get s2 2))", "(<= (vec-get s1 3) (vec-get s2 3))",
         "(< (+ (vec-get s1 2) (vec-get s1 3)) (+ (vec-get s2 2) (vec-get s2 3)))",
         "(= 0 (% (- (vec-get s2 2) (vec-get s1 2)) 2))", "(= 0 (% (- (vec-get s2 3) (vec-get s1 3)) 2))",
         f"(= p2 (vec-of (+ (vec-get p1 0) {d[0]}) (+ (vec-get p1 1) {d[1]}) (+ (vec-get p1 2) {d[0]})"
         f" (+ (vec-get p1 3) {d[1]})))"],
        [f"(union t1 {conv('x', zero_padded, 'b1', padding='p2', groups=1)})"])


def _rules() -> tuple[Rule, ...]:
    merged = pat.split(f"(Matmul a {pat.concat('b', 'c', axis=1)})", axis="(- (vec-length sa) 1)",
                       sizes="(vec-of (vec-get sb 1) (vec-get sc 1))")
    return (
        Rule("merge-matmul", "A @ B, A @ C = split(A @ concat(B, C))  (B, C weight matrices)",
             rule(["(= t1 (Matmul a b))", "(= t2 (Matmul a c))", ORDERED, "(const b)", "(const c)",
                   rank("b", 2), rank("c", 2), shape("a", "sa"), shape("b", "sb"), shape("c", "sc"),
                   "(>= (vec-length sa) 2)"],
                  [f"(let m {merged})", "(union t1 (Get m 0))", "(union t2 (Get m 1))"])),
        Rule("merge-conv", "conv(x, W1, b1), conv(x, W2, b2) = split(conv(x, concat(W1, W2), concat(b1, b2)))",
             _merge_conv(False) + "\n" + _merge_conv(True)),
        Rule("conv-enlarge", "conv(x, W) = conv(x, zero-pad(W), padding + d)  (to merge with a larger kernel)",
             _enlarge()),
    )


def merge_rules() -> Ruleset:
    return Ruleset("merge", _rules(), first_steps=2)


def _sibling_key(data: EGraphData, cid: int, const) -> tuple | None:
    """What a source value must share with its siblings to merge: (kind, input, attrs, ...)."""
    for n in data.classes[cid].nodes:
        kids = n.children
        if n.op is Op.MATMUL and kids[1] in const and data.classes[kids[1]].type.rank == 2 \
                and data.classes[kids[0]].type.rank >= 2:
            return ("matmul", kids[0], data.classes[kids[1]].type.shape[0]), n
        if n.op is Op.CONV and n.attrs["groups"] == 1 and kids[1] in const and (len(kids) < 3 or kids[2] in const):
            attrs = tuple(sorted(n.attrs.items()))
            return ("conv", kids[0], attrs, data.classes[kids[1]].type.shape[1:], len(kids) > 2), n
    return None


def merge_siblings(session, data: EGraphData) -> int:
    """Merge every group of n >= 3 source matmuls (convolutions) of one input over weights."""
    const = weight_only(data)
    groups: dict[tuple, list] = {}
    for cid in sorted(data.classes):
        if data.classes[cid].name is None:  # not a value of the source program
            continue
        found = _sibling_key(data, cid, const)
        if found:
            groups.setdefault(found[0], []).append((cid, found[1]))
    unions = 0
    for key, members in groups.items():
        if len(members) < 3:
            continue
        ws = tuple(n.children[1] for _, n in members)
        if key[0] == "matmul":
            axis = data.classes[members[0][0]].type.rank - 1
            merged = Term(Op.MATMUL, (key[1], Term(Op.CONCAT, ws, {"axis": 1})))
            sizes = tuple(data.classes[w].type.shape[1] for w in ws)
        else:
            bias = Term(Op.CONCAT, tuple(n.children[2] for _, n in members), {"axis": 0}) if key[4] else ABSENT
            merged = Term(Op.CONV, (key[1], Term(Op.CONCAT, ws, {"axis": 0}), bias), dict(members[0][1].attrs))
            axis, sizes = 1, tuple(data.classes[w].type.shape[0] for w in ws)
        product = session.add(merged)
        for k, (cid, _) in enumerate(members):
            session.union(cid, Term(Op.SPLIT, (product,), {"axis": axis, "sizes": sizes}, output=k))
            unions += 1
    return unions


def merge_generator() -> Generator:
    return Generator("merge-siblings", "op(x, W1), ..., op(x, Wn) = split(op(x, concat(W1, ..., Wn)))",
                     merge_siblings, every=1, first_steps=1)
