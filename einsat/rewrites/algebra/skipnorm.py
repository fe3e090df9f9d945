"""A residual sum feeding a norm, as one op writing both: `skip_layernorm` and `skip_rmsnorm`
(onnxruntime's contrib SkipLayerNormalization and SkipSimplifiedLayerNormalization).

    layernorm(x + skip, w, b)  =  skip_layernorm(x, skip, w, b)[0],   x + skip  =  skip_layernorm(..)[1]
    layernorm((x + c) + skip, w, b)  =  skip_layernorm(x, skip, w, b, c)[0]   (c a [hidden] bias)
    rmsnorm(x + skip, w)  =  skip_rmsnorm(x, skip, w)[0],   x + skip  =  skip_rmsnorm(..)[1]

A generator (`skipnorm_generator`): it reads, in the e-graph, every class holding a layernorm or
an rmsnorm (the source program's, or one the norm generators recognized in the exporter's chain)
whose input class holds a sum `x + skip` (either order; x of the sum's shape, skip broadcasting
to it), and unions the skip op's output 0 into the norm's class and its output 1 into the sum's:
one multi-output application (`Get`), so the residual stream that later layers read (a
transformer layer's every residual add) comes from the same node, paid once by the extraction.
With a bias: where x is itself `m + c`, c broadcasting to the normalized dims but not of the
sum's shape (BERT's Add(MatMul, bias) before the residual Add), the form with c as the op's bias
is added too (onnxruntime's bias input; the sum's two adds reassociated, as the algebra rules do).

Only for a cost model of onnxruntime (`CostModel.contrib_ops`, cost "cpu"): the ops are its
kernels. For a GPU target the fusion generator's `eop_multi` writes the norm and the sum in one
kernel already (`rewrites.derive.fusion`), and the skip ops would only add e-nodes.
"""

from __future__ import annotations

from einsat.egraph.data import EGraphData
from einsat.egraph.rules import Generator
from einsat.egraph.terms import Term
from einsat.ir.groups import SKIP_NORM_OF
from einsat.ir.registry import Op
from einsat.ir.types import is_float
from einsat.rewrites.algebra.reading import Reader, broadcasts_within


def _present(children, k):
    return children[k] if len(children) > k and children[k] >= 0 else None


def _residuals(r: Reader, s, norm_dims):
    """(sum, x, skip, bias) for each way the class `s` (or a class equal to it through casts to
    its own dtype: the legacy exports' Cast(x, float32)) is a residual sum `sum`: x + skip with x
    of s's shape and skip broadcasting to it (bias None), and (m + c) + skip with c a bias of the
    normalized dims."""
    t = r.type(s)
    seen = set()
    for c in sorted(r.same(s)):
        for n in r.nodes(c, Op.ADD):
            for a, b in (n.children, n.children[::-1]):
                ta, tb = r.type(a), r.type(b)
                if ta is None or tb is None or ta.dtype != t.dtype or tb.dtype != t.dtype or ta.shape != t.shape:
                    continue
                if not broadcasts_within(tb.shape, t.shape):
                    continue
                found = [] if tb.shape == t.shape and (c, b, a, None) in seen else [(c, a, b, None)]  # one order
                for m, bias in r.sums(a):
                    tm, tc = r.type(m), r.type(bias)
                    if (tm is not None and tc is not None and tm.shape == t.shape and tm.dtype == t.dtype
                            and tc.dtype == t.dtype and tc.shape != t.shape and broadcasts_within(tc.shape, norm_dims)):
                        found.append((c, m, b, bias))
                for f in found:
                    if f not in seen:
                        seen.add(f)
                        yield f


def _key(op, children, attrs):
    """A skip application up to trailing absent inputs (-1 in the exported e-graph)."""
    kids = tuple(-1 if k is None else k for k in children)
    while kids and kids[-1] == -1:
        kids = kids[:-1]
    return op, kids, tuple(sorted(attrs.items()))


def skipnorm_terms(session, data: EGraphData) -> int:
    if not getattr(session.cost, "contrib_ops", False):
        return 0
    r = Reader(data)
    unions = 0
    for cid in sorted(data.classes):
        t = r.type(cid)
        if t is None or t.rank == 0 or not is_float(t.dtype):
            continue
        have = {_key(n.op, n.children, n.attrs) for n in data.classes[cid].nodes
                if n.op in SKIP_NORM_OF.values() and n.output == 0}
        for norm_op, skip_op in SKIP_NORM_OF.items():
            for n in r.nodes(cid, norm_op):
                s, scale = n.children[0], n.children[1]
                beta = _present(n.children, 2) if norm_op is Op.LAYERNORM else None
                ts = r.type(s)
                if ts is None or ts.shape != t.shape:
                    continue
                attrs = {"axis": n.attrs["axis"], "epsilon": n.attrs["epsilon"]}
                for total, x, skip, bias in _residuals(r, s, t.shape[attrs["axis"]:]):
                    params = (scale, beta) if norm_op is Op.LAYERNORM else (scale,)
                    kids = (x, skip, *params) + ((bias,) if bias is not None else ())
                    while kids and kids[-1] is None:
                        kids = kids[:-1]
                    key = _key(skip_op, kids, attrs)
                    if key in have:
                        continue
                    have.add(key)
                    session.union(cid, Term(skip_op, kids, attrs, output=0))
                    session.union(total, Term(skip_op, kids, attrs, output=1))
                    unions += 1
    return unions


def skipnorm_generator() -> Generator:
    return Generator("skipnorm", "norm(x + skip) = skip_norm(x, skip)[0], x + skip = skip_norm(x, skip)[1]  "
                     "(layernorm, rmsnorm; a [hidden] bias of x moved into the op; onnxruntime targets only)",
                     skipnorm_terms)
