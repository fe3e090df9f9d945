"""Self-attention whose Q, K and V are head-split projections of one input, as one
`packed_attention` (onnxruntime's contrib `Attention`: one GEMM for the three projections, then
the attention kernel threaded over the heads).

    attention(heads(x @ Wq + bq), heads(x @ Wk + bk), heads(x @ Wv + bv), mask)
        =  transpose(reshape(packed_attention(x, concat(Wq, Wk, Wv), concat(bq, bk, bv), mask)))
    heads(p) = transpose(reshape(p, [B, S, N, D]), [0, 2, 1, 3])

A generator (`packed_attention_generator`): it reads, in the e-graph, every `attention` (the
attention generator's, from the exporter's chain) whose q, k and v classes each hold
`heads(p)` (the transpose also as two composing to it: an export's kᵀ = Transpose(.., [0, 2, 3,
1]) read back as k) with p [B, S, N·D] either

- a projection of one and the same x [B, S, Hin]: `m + b` (either order) or `m`, with m =
  `x @ W`, W a weight-only [Hin, N·D] and b a weight-only [N·D] (all three with a bias, or none),
  or the same in 2-D on x reshaped to [B·S, Hin] (`Gemm`, or MatMul + Add) reshaped back; the
  packed weight and bias are then concatenations of weights (folded, paid once); or
- output 0, 1, 2 of one equal three-way split of such a projection [B, S, 3·N·D] (GPT-2's
  c_attn, the merge-siblings generator's merged product): its weight and bias as they are.

Q, K and V must have the same N and D (onnxruntime's packed layout). It unions the attention's class with
`transpose(reshape(packed_attention(..), [B, S, N, D]), [0, 2, 1, 3])`, and, so that the
extraction need not go through the heads' layout at all, the class of the attention's
`transpose(.., [0, 2, 1, 3])` (or the class whose transpose the attention's class holds: the
exported e-graph keeps no cycle) with `reshape(packed, [B, S, N, D])` and the class of that one's
`reshape(.., [B, S, N·D])` (BERT's merge of the heads) with the packed op itself (any other
reshape, [B·S, N·D] say, with that reshape of the packed op).

Only for a cost model of onnxruntime (`CostModel.contrib_ops`, cost "cpu"): the op is its kernel
(measured on onnxruntime 1.31: docs/export.md, "onnxruntime's packed Attention"). Other targets
have `attention` and the merge-siblings GEMM already.
"""

from __future__ import annotations

from einsat.egraph.data import EGraphData
from einsat.egraph.rules import Generator
from einsat.egraph.terms import Term
from einsat.egraph.weights import weight_only
from einsat.ir.registry import Op
from einsat.rewrites.algebra.reading import Reader

HEADS = (0, 2, 1, 3)  # [B, S, N, D] <-> [B, N, S, D]
MAX_PROJECTIONS = 4  # projection readings per q, k, v class


def _projections(r: Reader, p, const):
    """(x, W, b or None) for each way the class p [B, S, F] is x @ W (+ b), W and b weights, x
    [B, S, Hin]: a 3-D product, or the reshape to [B, S, F] of the 2-D one of x reshaped to
    [B·S, Hin] (the legacy exports' Gemm, GPT-2's Conv1D)."""
    tp = r.type(p)
    bsz, s, f = tp.shape
    found = []

    def three_d(x):
        tx = r.type(x)
        if tx is not None and tx.rank == 3 and tx.shape[:2] == (bsz, s):
            yield x

    def flat(x):
        tx = r.type(x)
        if tx is None or tx.rank != 2 or tx.shape[0] != bsz * s:
            return
        for c in sorted(r.same(x)):
            for rn in r.nodes(c, Op.RESHAPE):
                x3 = rn.children[0]
                if r.type(x3) is not None and r.type(x3).shape == (bsz, s, tx.shape[1]):
                    yield x3

    def weight(w, shape_ok):
        tw = r.type(w)
        return w in const and tw is not None and shape_ok(tw.shape)

    def products(m, bias, inputs):
        for c in sorted(r.same(m)):
            for n in r.nodes(c, Op.MATMUL):
                x, w = n.children
                if weight(w, lambda sh: len(sh) == 2 and sh[1] == f):
                    found.extend((x3, w, bias) for x3 in inputs(x) if r.type(w).shape[0] == r.type(x3).shape[2])
            for n in r.nodes(c, Op.GEMM):
                a = n.attrs
                if (len(n.children) == 3 and a["alpha"] == 1.0 and a["beta"] == 1.0 and not a["trans_a"]
                        and not a["trans_b"] and bias is None and weight(n.children[2], lambda sh: sh == (f,))
                        and weight(n.children[1], lambda sh: len(sh) == 2 and sh[1] == f)):
                    x, w, c = n.children
                    found.extend((x3, w, c) for x3 in inputs(x) if r.type(w).shape[0] == r.type(x3).shape[2])

    forms = [(p, three_d)] + [(rn.children[0], flat) for c in sorted(r.same(p)) for rn in r.nodes(c, Op.RESHAPE)
                              if r.type(rn.children[0]) is not None and r.type(rn.children[0]).shape == (bsz * s, f)]
    for q, inputs in forms:
        products(q, None, inputs)
        for m, b in r.sums(q):
            if weight(b, lambda sh: sh == (f,)) and r.type(m) is not None and r.type(m).shape == r.type(q).shape:
                products(m, b, inputs)
    return list(dict.fromkeys(found))[:MAX_PROJECTIONS]


def _heads(r: Reader, c):
    """(N, D, p) for each way the class c [B, N, S, D] is heads(p): Transpose(Reshape(p, [B, S, N, D]),
    [0, 2, 1, 3]) with p [B, S, N·D]."""
    tc = r.type(c)
    if tc is None or tc.rank != 4:
        return
    bsz, n, s, d = tc.shape
    for src in _transposed(r, c, HEADS):
        for rn in r.nodes(src, Op.RESHAPE):
            p = rn.children[0]
            tp = r.type(p)
            if tp is not None and tp.shape == (bsz, s, n * d) and tp.dtype == tc.dtype:
                yield n, d, p


def _transposed(r: Reader, c, perm, depth: int = 2):
    """The classes x with c = transpose(x, perm): one transpose, or two composing to it (the key of
    an export's Transpose(Transpose(k, [0, 2, 3, 1]), [0, 1, 3, 2]), before the layout rules merge
    them)."""
    seen = set()
    todo = [(cc, tuple(range(len(perm)))) for cc in sorted(r.same(c))]
    for _ in range(depth):
        nxt = []
        for cc, outer in todo:
            for t in r.nodes(cc, Op.TRANSPOSE):
                inner = tuple(t.attrs["perm"])
                total = tuple(inner[i] for i in outer)  # transpose(transpose(x, inner), outer)
                x = t.children[0]
                if total == tuple(perm) and x not in seen:
                    seen.add(x)
                    yield x
                nxt.append((x, total))
        todo = nxt


def _split_of(r: Reader, p, k: int):
    """The classes P [B, S, 3·F] whose equal three-way split along the last axis has p as output k
    (GPT-2's packed c_attn, the merge-siblings generator's split)."""
    tp = r.type(p)
    for c in sorted(r.same(p)):
        for n in r.nodes(c, Op.SPLIT):
            src = r.type(n.children[0])
            if (n.output == k and src is not None and src.rank == 3 and n.attrs["axis"] % 3 == 2
                    and tuple(n.attrs["sizes"]) == (tp.shape[2],) * 3):
                yield n.children[0]


def packed_attention_terms(session, data: EGraphData) -> int:
    if not getattr(session.cost, "contrib_ops", False):
        return 0
    r = Reader(data)
    const = weight_only(data)
    transposes: dict[int, list[int]] = {}
    reshapes: dict[int, list[tuple[int, tuple]]] = {}
    for cid, cls in data.classes.items():
        for n in cls.nodes:
            if n.op is Op.TRANSPOSE and tuple(n.attrs["perm"]) == HEADS:
                transposes.setdefault(n.children[0], []).append(cid)
            elif n.op is Op.RESHAPE:
                reshapes.setdefault(n.children[0], []).append((cid, tuple(n.attrs["shape"])))
    unions = 0
    for cid in sorted(data.classes):
        if any(r.nodes(rn.children[0], Op.PACKED_ATTENTION) for t in r.nodes(cid, Op.TRANSPOSE)
               for rn in r.nodes(t.children[0], Op.RESHAPE)):
            continue  # done in an earlier round
        for att in r.nodes(cid, Op.ATTENTION):
            mask = att.children[3] if len(att.children) > 3 and att.children[3] >= 0 else None
            if mask is not None and (r.type(mask) is None or r.type(mask).rank > 4):
                continue
            term = _packed(r, att, mask, const)
            if term is None:
                continue
            bsz, n, s, d = r.type(cid).shape
            split = Term(Op.RESHAPE, (term,), {"shape": (bsz, s, n, d)})
            session.union(cid, Term(Op.TRANSPOSE, (split,), {"perm": HEADS}))
            # the heads merged back, [B, S, N, D]: a parent transpose, or (the export keeps no cycle)
            # the class the attention's own transpose reads
            merged = set(transposes.get(cid, []))
            merged |= {t.children[0] for t in r.nodes(cid, Op.TRANSPOSE) if tuple(t.attrs["perm"]) == HEADS}
            for tc in sorted(merged):
                session.union(tc, split)
                for rc, shape in reshapes.get(tc, []):
                    session.union(rc, term if shape == (bsz, s, n * d) else Term(Op.RESHAPE, (term,), {"shape": shape}))
            unions += 1
            break
    return unions


def _packed(r: Reader, att, mask, const):
    """The packed_attention term of `att` (an attention e-node), or None when its q, k and v are not
    head-split projections of one input (the module docstring)."""
    readings = []
    for c in att.children[:3]:
        found = list(_heads(r, c))
        if not found:
            return None
        readings.append(found)

    def term(x, w, b, heads):
        kids = (x, w, b) + ((mask,) if mask is not None else ())
        while kids and kids[-1] is None:
            kids = kids[:-1]
        return Term(Op.PACKED_ATTENTION, kids, {"num_heads": heads, "scale": att.attrs["scale"],
                                                "causal": att.attrs["causal"]})

    for nq, dq, pq in readings[0]:
        for nk, dk, pk in readings[1]:
            for nv, dv, pv in readings[2]:
                if not nq == nk == nv or not dq == dk == dv:
                    continue
                # one packed projection split three ways: its weight and bias as they are
                for whole in set(_split_of(r, pq, 0)) & set(_split_of(r, pk, 1)) & set(_split_of(r, pv, 2)):
                    for x, w, b in _projections(r, whole, const):
                        return term(x, w, b, nq)
                # three projections of one input: their weights and biases concatenated
                for xq, wq, bq in _projections(r, pq, const):
                    for xk, wk, bk in _projections(r, pk, const):
                        for xv, wv, bv in _projections(r, pv, const):
                            if not (r.equal(xq, xk) and r.equal(xq, xv)):
                                continue
                            if (bq is None) != (bk is None) or (bq is None) != (bv is None):
                                continue
                            w = Term(Op.CONCAT, (wq, wk, wv), {"axis": 1})
                            b = None if bq is None else Term(Op.CONCAT, (bq, bk, bv), {"axis": 0})
                            return term(xq, w, b, nq)
    return None


def packed_attention_generator() -> Generator:
    return Generator("packed-attention", "attention(heads(x @ Wq + bq), heads(x @ Wk + bk), heads(x @ Wv + bv), m) "
                     "= heads(packed_attention(x, concat(W), concat(b), m))  (onnxruntime targets only)",
                     packed_attention_terms)
