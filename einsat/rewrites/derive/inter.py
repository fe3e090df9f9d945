"""EinNet's inter-expression rules (§4.2): splitting, merging and fusing expressions.

As functions on expressions (each with a property test):
- `split_expression(e, axis, at)`: L_X f = concat(L_X1 f, L_X2 f), X cut along one traversal;
- `merge_expressions(e1, e2)`: two independent expressions that differ only in their inputs as
  one over a new leading traversal, reading the inputs stacked (shared inputs read once);
- `fuse(outer, k, inner)`: the expression fed by another, `inner` becoming a scope of `outer`
  where it read input k.

In the e-graph, as generators over instantiated programs:
- `eop_fusion_generator`: an element-wise or layout op (or an eOperator) over eOperators is one
  eOperator (EinNet's OffsetReduce + ReLU, Fig. 3(a); two eOperators writing one concatenated
  operand, Fig. 15);
- `matmul_merge_generator`: matmuls of one operand with weights merge into one (a split of
  their concatenated weights), and same-shape matmuls of weights with different operands into a
  batchmatmul (EinNet Fig. 15's GCN: merged, then batched). Each pair once, bounded per round.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import islice, product

from einsat.egraph.data import ABSENT, EGraphData
from einsat.egraph.rules import Generator
from einsat.egraph.terms import Term
from einsat.ir.expr.index import var
from einsat.ir.expr.measure import is_memory_bound
from einsat.ir.expr.nodes import Expr, Iter, Read, inputs_used, map_reads, relabel_inputs
from einsat.ir.expr.printer import canonical, fingerprint
from einsat.ir.groups import EOP_FUSABLE
from einsat.ir.registry import Op, opdef
from einsat.rewrites.post.fold import reachable, weight_only

MAX_PAIRS = 32


# -- expressions --------------------------------------------------------------------------------

def split_expression(e: Expr, axis: int, at: int) -> tuple[Expr, Expr]:
    """(e1, e2) with concat(e1, e2, axis) = e: the traversal `axis` cut `at` points in."""
    it = e.loops[axis]
    cut = it.lo + at
    first = e.loops[:axis] + (Iter(it.name, it.lo, cut),) + e.loops[axis + 1:]
    second = e.loops[:axis] + (Iter(it.name, cut, it.hi),) + e.loops[axis + 1:]
    return replace(e, loops=first, _hash=0), replace(e, loops=second, _hash=0)


def merge_expressions(e1: Expr, e2: Expr) -> tuple[Expr, list[tuple[int, int]]] | None:
    """(e, pairs): e reads input j as the stack of inputs pairs[j] = (k1, k2) (a new leading dim
    of size 2) when k1 != k2, as it is when the two read one input; stack(e1, e2) = e. None when
    the two compute differently."""
    used1, used2 = sorted(inputs_used(e1)), sorted(inputs_used(e2))
    if len(used1) != len(used2):
        return None
    pairs = list(zip(used1, used2))
    mapping = {k2: k1 for k1, k2 in pairs}
    if canonical(relabel_inputs(e2, mapping))[1] != canonical(e1)[1]:
        return None
    b = Iter("_b", 0, 2)
    position = {k1: j for j, (k1, _) in enumerate(pairs)}

    def stacked(r: Read):
        if isinstance(r.src, Expr):
            return r
        j = position[r.src]
        k1, k2 = pairs[j]
        return Read(j, (var(b.name),) + r.idx if k1 != k2 else r.idx)

    if any(isinstance(r.src, Expr) for r in _reads(e1)):
        return None  # scopes would need stacking too
    return Expr((b,) + e1.loops, e1.sums, map_reads(e1.body, stacked), e1.reduce), pairs


def fuse(outer: Expr, k: int, inner: Expr, inner_inputs: list[int]) -> Expr:
    """`outer` with its input k computed by `inner` in place (a scope); `inner` reads input j of
    its own as outer's input inner_inputs[j]."""
    scope = relabel_inputs(inner, dict(enumerate(inner_inputs)))

    def put(r: Read):
        if r.src != k:
            return r
        return Read(scope, tuple(i + lo for i, lo in zip(r.idx, scope.lows)))
    return outer.with_body(map_reads(outer.body, put))


def _reads(e: Expr) -> list[Read]:
    from einsat.ir.expr.nodes import reads
    return reads(e.body)


# -- generators ---------------------------------------------------------------------------------

FUSABLE = EOP_FUSABLE  # the registry's `eop_fusable`: element-wise, layout ops and eops


MAX_FUSIONS = 8  # fused variants per e-node: a child class may hold several eOperators


def fuse_eops(session, data: EGraphData) -> int:
    """Union `f(..., eop(...), ...)` with one eop computing both (f element-wise, a layout op or
    an eop; the result memory-bound), for up to `MAX_FUSIONS` choices of the children's eops."""
    unions = 0
    eops = {cid: [n for n in cls.nodes if n.op is Op.EOP][:3] for cid, cls in data.classes.items()}
    for cid in sorted(data.classes):
        have = {(n.attrs["expr"], n.children) for n in data.classes[cid].nodes if n.op is Op.EOP}
        for node in data.classes[cid].nodes:
            if node.op not in FUSABLE or ABSENT in node.children or not any(eops[c] for c in node.children):
                continue
            options = [eops[c] or [None] for c in node.children]
            for choice in islice(product(*options), MAX_FUSIONS):
                fused = _fused(node, data, choice)
                if fused is not None and (fused.attrs["expr"], fused.children) not in have:
                    have.add((fused.attrs["expr"], fused.children))
                    session.union(cid, fused)
                    unions += 1
            break
    return unions


def _fused(node, data: EGraphData, choice) -> Term | None:
    """`node` with each child in `choice` (an eop e-node, or None: kept as an input) fused in."""
    types = [data.classes[c].type for c in node.children]
    outer = opdef(node.op).expression(types, node.attrs)
    if outer is None:
        return None
    children = list(node.children)
    shapes = [t.shape for t in types]
    for k, inner_node in enumerate(choice):
        if inner_node is None:
            continue
        inner = opdef(Op.EOP).expression([], inner_node.attrs)
        base = len(children)
        children.extend(inner_node.children)
        shapes.extend(data.classes[c].type.shape for c in inner_node.children)
        outer = fuse(outer, k, inner, list(range(base, base + len(inner_node.children))))
    if not is_memory_bound(outer, shapes):
        return None
    used = sorted(inputs_used(outer))
    e = relabel_inputs(outer, {k: j for j, k in enumerate(used)})
    return Term(Op.EOP, tuple(children[k] for k in used), {"expr": fingerprint(e), "chain": ""})


def eop_fusion_generator(every: int = 1) -> Generator:
    return Generator("eop-fusion", "f(eop(x)) = eop'(x), eop' the fused expression (EinNet §4.2 fusion)",
                     fuse_eops, every=every)


def merge_matmuls(session, data: EGraphData) -> int:
    """Matmuls with weight left operands: one operand shared -> one matmul of the concatenated
    weights, split; same shapes, other operands -> a batchmatmul of the stacked ones, sliced.
    Only matmuls computing parts of different source values pair (two derivations of one value
    are alternatives, not both needed), one per source value: its smallest."""
    const = weight_only(data)
    owner = _owners(data)
    best: dict[int, tuple] = {}
    for cid in sorted(data.classes):
        for n in data.classes[cid].nodes:
            if n.op is Op.MATMUL and n.children[0] in const and n.children[1] not in const:
                a, b = (data.classes[c].type for c in n.children)
                if a.rank == 2 and b.rank in (2, 3) and (b.rank == 2 or b.shape[0] == 1) and len(owner[cid]) == 1:
                    (src,) = owner[cid]
                    key = (a.size, cid)
                    if src not in best or key < best[src][0]:
                        best[src] = (key, cid, n)
                break
    mms = [(cid, n) for _, cid, n in sorted(best.values(), key=lambda t: t[0][1])]
    unions, pairs, used = 0, 0, set()
    for i, (c1, n1) in enumerate(mms):
        for c2, n2 in mms[i + 1:]:
            if pairs >= MAX_PAIRS or c1 in used or c2 in used or c1 == c2:
                continue
            a1, a2 = (data.classes[n.children[0]].type for n in (n1, n2))
            b1, b2 = (data.classes[n.children[1]].type for n in (n1, n2))
            if a1.shape[1] != a2.shape[1] or b1 != b2:
                continue
            if n1.children[1] == n2.children[1]:
                unions += _merge_shared(session, data, (c1, n1), (c2, n2))
            elif a1 == a2 and not _depends(data, c1, c2) and not _depends(data, c2, c1):
                unions += _batch(session, data, (c1, n1), (c2, n2))
            else:
                continue
            used |= {c1, c2}
            pairs += 1
    return unions


def _merge_shared(session, data, first, second) -> int:
    (c1, n1), (c2, n2) = first, second
    rows = tuple(data.classes[n.children[0]].type.shape[0] for n in (n1, n2))
    merged = Term(Op.MATMUL, (Term(Op.CONCAT, (n1.children[0], n2.children[0]), {"axis": 0}), n1.children[1]))
    axis = data.classes[c1].type.rank - 2
    for k, c in enumerate((c1, c2)):
        session.union(c, Term(Op.SPLIT, (merged,), {"axis": axis, "sizes": rows}, output=k))
    return 2


def _batch(session, data, first, second) -> int:
    (c1, n1), (c2, n2) = first, second
    b = data.classes[n1.children[1]].type
    stack_a = Term(Op.CONCAT, tuple(Term(Op.UNSQUEEZE, (n.children[0],), {"axes": (0,)}) for n in (n1, n2)),
                   {"axis": 0})
    if b.rank == 2:
        bs = tuple(Term(Op.UNSQUEEZE, (n.children[1],), {"axes": (0,)}) for n in (n1, n2))
    else:
        bs = tuple(n.children[1] for n in (n1, n2))
    product = Term(Op.BATCHMATMUL, (stack_a, Term(Op.CONCAT, bs, {"axis": 0})))
    out = data.classes[c1].type.shape
    for k, c in enumerate((c1, c2)):
        part = Term(Op.SLICE, (product,), {"starts": (k, 0, 0), "ends": (k + 1,) + product_dims(data, n1),
                                           "axes": (0, 1, 2), "steps": (1, 1, 1)})
        session.union(c, part if len(out) == 3 else Term(Op.SQUEEZE, (part,), {"axes": (0,)}))
    return 2


def product_dims(data, n) -> tuple[int, int]:
    a, b = (data.classes[c].type for c in n.children)
    return a.shape[0], b.shape[-1]


def _owners(data: EGraphData) -> dict[int, set[int]]:
    """For every e-class, the values of the source program it is a part of: itself when it is
    one, else the named e-classes that reach it through unnamed ones."""
    out: dict[int, set[int]] = {c: {c} if data.classes[c].name is not None else set() for c in data.classes}
    for top in data.classes:
        if data.classes[top].name is None:
            continue
        seen, stack = set(), [k for n in data.classes[top].nodes for k in n.children if k != ABSENT]
        while stack:
            c = stack.pop()
            if c in seen or data.classes[c].name is not None:
                continue
            seen.add(c)
            out[c].add(top)
            stack.extend(k for n in data.classes[c].nodes for k in n.children if k != ABSENT)
    return out


def _depends(data: EGraphData, top: int, on: int) -> bool:
    """Whether e-class `top` reaches `on` through its e-nodes' children."""
    return on in reachable(data, [top])


def matmul_merge_generator(every: int = 1) -> Generator:
    return Generator("merge-derived-matmuls",
                     "W1 @ X, W2 @ X = split([W1; W2] @ X); W1 @ X1, W2 @ X2 = batchmatmul([W1, W2], [X1, X2])",
                     merge_matmuls, every=every)
