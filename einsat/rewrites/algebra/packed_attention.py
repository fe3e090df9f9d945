"""Self-attention whose Q, K and V are head-split projections of one input, as one
`packed_attention` (onnxruntime's contrib `Attention`: one GEMM for the three projections, then
the attention kernel threaded over the heads).

    attention(heads(x @ Wq + bq), heads(x @ Wk + bk), heads(x @ Wv + bv), mask)
        =  transpose(reshape(packed_attention(x, concat(Wq, Wk, Wv), concat(bq, bk, bv), mask)))
    heads(p) = transpose(reshape(p, [B, S, N, D]), [0, 2, 1, 3])

A generator (`packed_attention_generator`): it reads, in the e-graph, every `attention` (the
attention generator's, from the exporter's chain) whose q, k and v classes each hold
`heads(p)` with p a projection of one and the same x [B, S, Hin]: `m + b` (either order) or `m`,
with m = `x @ W`, W a weight-only [Hin, N·D] and b a weight-only [N·D] (all three with a bias,
or none). The packed weight and bias are concatenations of weights (folded, paid once). Q, K and
V must have the same N and D (onnxruntime's packed layout). It unions the attention's class with
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
    """(x, W, b or None) for each way the class p [B, S, N·D] is x @ W (+ b), W and b weights."""
    tp = r.type(p)
    found = []

    def matmuls(m, bias):
        for c in sorted(r.same(m)):
            for n in r.nodes(c, Op.MATMUL):
                x, w = n.children
                tx, tw = r.type(x), r.type(w)
                if (w in const and tx is not None and tw is not None and tx.rank == 3 and tw.rank == 2
                        and tx.shape[:2] == tp.shape[:2] and tw.shape[1] == tp.shape[2]):
                    found.append((x, w, bias))

    matmuls(p, None)
    for m, b in r.sums(p):
        tb = r.type(b)
        if b in const and tb is not None and tb.shape == (tp.shape[2],) and r.type(m) is not None \
                and r.type(m).shape == tp.shape:
            matmuls(m, b)
    return found[:MAX_PROJECTIONS]


def _heads(r: Reader, c, const):
    """(N, D, [(x, W, b)]) for each way the class c [B, N, S, D] is heads(x @ W (+ b))."""
    tc = r.type(c)
    if tc is None or tc.rank != 4:
        return
    bsz, n, s, d = tc.shape
    for cc in sorted(r.same(c)):
        for t in r.nodes(cc, Op.TRANSPOSE):
            if tuple(t.attrs["perm"]) != HEADS:
                continue
            for rn in r.nodes(t.children[0], Op.RESHAPE):
                p = rn.children[0]
                tp = r.type(p)
                if tp is not None and tp.shape == (bsz, s, n * d) and tp.dtype == tc.dtype:
                    projs = _projections(r, p, const)
                    if projs:
                        yield n, d, projs


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
        found = list(_heads(r, c, const))
        if not found:
            return None
        readings.append(found)
    for nq, dq, pq in readings[0]:
        for nk, dk, pk in readings[1]:
            for nv, dv, pv in readings[2]:
                if not nq == nk == nv or not dq == dk == dv:
                    continue
                for xq, wq, bq in pq:
                    for xk, wk, bk in pk:
                        for xv, wv, bv in pv:
                            if not (r.equal(xq, xk) and r.equal(xq, xv)):
                                continue
                            if (bq is None) != (bk is None) or (bq is None) != (bv is None):
                                continue
                            w = Term(Op.CONCAT, (wq, wk, wv), {"axis": 1})
                            b = None if bq is None else Term(Op.CONCAT, (bq, bk, bv), {"axis": 0})
                            kids = (xq, w, b) + ((mask,) if mask is not None else ())
                            while kids and kids[-1] is None:
                                kids = kids[:-1]
                            return Term(Op.PACKED_ATTENTION, kids, {"num_heads": nq, "scale": att.attrs["scale"],
                                                                    "causal": att.attrs["causal"]})
    return None


def packed_attention_generator() -> Generator:
    return Generator("packed-attention", "attention(heads(x @ Wq + bq), heads(x @ Wk + bk), heads(x @ Wv + bv), m) "
                     "= heads(packed_attention(x, concat(W), concat(b), m))  (onnxruntime targets only)",
                     packed_attention_terms)
