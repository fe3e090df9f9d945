"""Scaled dot-product attention: the matmul-scale-mask-softmax-matmul chain as one `attention` op,
and back.

    softmax(q @ kᵀ · s + mask) @ v  =  attention(q, k, v, mask; scale=s)

The forward direction is a generator (`attention_generator`), because the forms models export
need facts egglog rules cannot read: the scale is a scalar *weight* (BERT's 1/sqrt(d), a value,
not an attribute), written as a product (`scores * s`, `s * scores`), a quotient
(`scores / sqrt(d)`), or split over both operands (PyTorch's SDPA decomposition exports
`(q · s1) @ (kᵀ · s2)`, s1 · s2 = 1/sqrt(d)). For each e-class holding `p @ v` with p a softmax
over the last axis, it reads, in the e-graph:

- the softmax (in half, the converted program's cast(softmax(cast(x, fp32)), half): `_softmaxes`);
- the softmax's input: the scores, or `scores + mask` (either order) with a mask that
  broadcasts to the scores;
- the scale: `scores = x · c`, `c · x` or `x / c` for a scalar weight c, or none (1);
- `x = a @ kt` (a and kt possibly scaled by scalar weights, as above), with `kt = transpose(k)`
  over the last two axes, or any other kt (then k = transpose(kt), a new term);
- PyTorch's guard `where(isnan(p), 0, p)` around the softmax, when the mask is finite by
  construction (absent, a finite constant, or `where(cond, a, b)` of finite scalar constants: HF
  BERT's and GPT-2's padding and causal masks): the scores are then finite for finite q and k,
  no softmax row is NaN, and the guard is the identity;
- the same guard over a mask that may hold -inf (the legacy TorchScript exports of HF's LLMs:
  `where(cond, 0, -inf)`, the scale split as √scale on q and on kᵀ): a softmax row is all NaN
  (every score -inf, or a NaN among them: the row's sum is NaN) or has none, so the guard zeroes
  whole rows of p, and for finite v the rows of p @ v it zeroes are those NaN in attention's
  result: the class gets `where(isnan(attention(..)), 0, attention(..))` (a scalar 0);

- kt as the dynamo exports write a 3-D bmm's operand: Reshape(Transpose(Reshape(k))) with both
  reshapes changing the batch dims only (each [S, D] matrix whole and in order): k itself;

and unions the class with `attention(q, k, v, mask; scale)`. GQA (`grouped_terms`, on the
attentions of the previous step): where k and v are HF's repeat_kv of K/V [B, A, S, D]
(Reshape(Expand(Unsqueeze(x, 2) -> [B, A, G, S, D]) -> [B, A·G, S, D]): head h reads K/V head
h // G), the class also gets Reshape(attention(Reshape(q, [B, A, G, Sq, D]), Unsqueeze(k), Unsqueeze(v),
mask'), [B, H, Sq, Dv]) (mask' the mask with a group axis where it has a head axis of 1): the
rank-5 form the attention op broadcasts, which the export writes as ONNX Attention's own K/V heads,
so the Expand copies need not be computed. Scales are float32 attributes: in a
float64 program the rewrite fires only where the scale is exactly a float32 (0.125, 1/sqrt(64)),
so both sides stay equal to the last bit of the scale; in float32/16 the scale's float32 rounding
is the program's own.

The backward direction is an egglog rule (`attention-expand`): a non-causal attention equals its
chain, with the scale as a `Fill` scalar. Causal attention keeps its op (its triangle is no
e-graph term). It runs in the first step only, before the generator: it expands the attention
ops the input program holds (so the extraction may still choose their chain), never the
generator's, whose class already holds the chain it was read from. Expanding those too made a
second chain per attention (a `Fill` scale, kᵀ as a transpose of a transpose) for the scalar and
AC rules to work over: on a BERT-base layer 22% more e-nodes, 52% more matches, and no
saturation within the default 10 steps.
"""

from __future__ import annotations

import numpy as np

from einsat.egraph.data import EGraphData
from einsat.egraph.patterns import NO_INPUT, pat
from einsat.egraph.rules import Generator, Rule, Ruleset, rule
from einsat.egraph.terms import Term
from einsat.ir.registry import Op
from einsat.ir.types import is_float
from einsat.rewrites.algebra.reading import Reader
from einsat.rewrites.guards import dtype, rank, shape

MAX_FORMS = 8  # attention terms per matmul class (each a distinct q, k, mask or scale)


def _swap_last(r: int) -> tuple[int, ...]:
    return tuple(range(r - 2)) + (r - 1, r - 2)


class _Reader(Reader):
    """Facts about e-classes of one export (`reading.Reader`: types, e-nodes by op, scalar constant
    values), and finite masks."""

    def finite(self, cid) -> bool:
        """The class's value is finite by construction: a finite constant, or `where(c, a, b)`
        (possibly under expand/reshape/cast to float) of such."""
        for n in self.data.classes[cid].nodes:
            if n.leaf is not None and n.leaf[0] == "weight" and n.leaf[1] in self.data.weights:
                a = np.asarray(self.data.weights[n.leaf[1]])
                if is_float(a.dtype) and np.isfinite(a).all():
                    return True
            if n.op is Op.WHERE and all(self.finite(c) for c in n.children[1:]):
                return True
            if n.op in (Op.EXPAND, Op.RESHAPE, Op.UNSQUEEZE) and self.finite(n.children[0]):
                return True
        return False

    def zero(self, cid) -> bool:
        return self.scalar(cid) == 0.0 or self._all_zero(cid)

    def _all_zero(self, cid) -> bool:
        for n in self.data.classes[cid].nodes:
            if n.leaf is not None and n.leaf[0] == "weight" and n.leaf[1] in self.data.weights:
                a = np.asarray(self.data.weights[n.leaf[1]])
                return is_float(a.dtype) and not a.any()
        return False

    def scaled(self, cid):
        """(x, factor) pairs with class = x · factor for each scalar product/quotient in the class,
        else [(cid, 1.0)]: a scalar factor is always taken into the scale (one form, no product
        left outside the attention)."""
        out = []
        t = self.type(cid)
        for n in self.data.classes[cid].nodes:
            if n.op not in (Op.MUL, Op.DIV):
                continue
            a, b = n.children
            pairs = [(a, b)] + ([(b, a)] if n.op is Op.MUL else [])
            for x, c in pairs:
                v = self.scalar(c)
                if v is None or v == 0.0 or self.type(x) is None or self.type(x).shape != t.shape:
                    continue
                out.append((x, v if n.op is Op.MUL else 1.0 / v))
        return out or [(cid, 1.0)]


def _scale_attr(value: float, dt) -> float | None:
    """The float32 attribute for `value`, or None when a float64 program would see it rounded."""
    f = float(np.float32(value))
    if np.dtype(dt) == np.float64 and f != value:
        return None
    return f


def _broadcasts(mask_shape, scores_shape) -> bool:
    try:
        return tuple(np.broadcast_shapes(mask_shape, scores_shape)) == tuple(scores_shape)
    except ValueError:
        return False


def _softmaxes(r: _Reader, pc: int, dt) -> list:
    """(softmax e-node, the scores it reads, in `dt`) for each softmax the class `pc` computes:
    softmax(x) itself, or in half (`dt` bf16 or fp16) the converted program's
    cast(softmax(cast(x, fp32)), dt), the statistics in fp32 as the conversion keeps them.
    Attention in half computes its scores and softmax in fp32 and writes the probabilities in
    half (`einsat.ir.ops.attention`): the cast form's one difference is that it rounds the scores
    to half first, a rounding of the kind a fused kernel drops (docs/precision.md)."""
    out = [(sm, sm.children[0]) for sm in r.nodes(pc, Op.SOFTMAX)]
    if not (is_float(dt) and np.dtype(dt).itemsize == 2):
        return out
    for narrow in r.nodes(pc, Op.CAST):
        wide = narrow.children[0]
        if r.type(wide) is None or r.type(wide).dtype != np.float32:
            continue
        for sm in r.nodes(wide, Op.SOFTMAX):
            out.extend((sm, c.children[0]) for c in r.nodes(sm.children[0], Op.CAST)
                       if r.type(c.children[0]) is not None and r.type(c.children[0]).dtype == dt)
    return out


def _forms(r: _Reader, cid: int):
    """(q, k or None (transpose kt), kt, v, mask, scale, zero) for each attention the class computes:
    zero None for `attention(..)` itself, else the class of the scalar 0 in PyTorch's guard over a
    mask that may hold -inf, for `where(isnan(attention(..)), 0, attention(..))`."""
    out = []
    t = r.type(cid)
    if t is None or t.rank < 2 or not is_float(t.dtype):
        return out
    for mm in r.nodes(cid, Op.MATMUL):
        p, v = mm.children
        tp, tv = r.type(p), r.type(v)
        if tp is None or tv is None or tp.rank < 2 or tv.rank < 2:
            continue
        probs = [(p, None)] + [(n.children[2], n.children[1]) for n in r.nodes(p, Op.WHERE)
                               if n.children[2] in [c for m in r.nodes(n.children[0], Op.ISNAN) for c in m.children]
                               and r.zero(n.children[1])]
        for pc, guard in probs:
            direct = r.nodes(pc, Op.SOFTMAX)
            for sm, x in _softmaxes(r, pc, tp.dtype):
                if sm.attrs["axis"] != tp.rank - 1:
                    continue
                # fp16's range (65504) is no mask's: an exporter's finfo.min mask is -inf or near it in
                # fp16, and scores + mask overflow to -inf in the converted program's fp16 add, which
                # attention (scores and mask in fp32) does not; so in fp16 the cast form is taken unmasked
                narrow_only = sm not in direct and np.dtype(tp.dtype) == np.float16
                masked = [(x, None)]
                for add in r.nodes(x, Op.ADD):
                    for s, m in ((add.children[0], add.children[1]), (add.children[1], add.children[0])):
                        ts, tm = r.type(s), r.type(m)
                        if ts is not None and tm is not None and ts.shape == tp.shape and tm.dtype == tp.dtype \
                                and _broadcasts(tm.shape, tp.shape):
                            masked.append((s, m))
                for s, m in masked:
                    if narrow_only and m is not None:
                        continue
                    zero = None
                    if guard is not None and m is not None and not r.finite(m):
                        # a row of softmax is all NaN or none: the guard zeroes whole rows, which
                        # the same guard on the output does (for finite v); it needs a scalar 0
                        if r.scalar(guard) != 0.0:
                            continue
                        zero = guard
                    for raw, f0 in r.scaled(s):
                        for prod in r.nodes(raw, Op.MATMUL):
                            for q, f1 in r.scaled(prod.children[0]):
                                for kt, f2 in r.scaled(prod.children[1]):
                                    tq, tk = r.type(q), r.type(kt)
                                    if tq is None or tk is None or tq.rank < 2 or tk.rank < 2:
                                        continue
                                    ks = [n.children[0] for n in r.nodes(kt, Op.TRANSPOSE)
                                          if n.attrs["perm"] == _swap_last(tk.rank)] + _batch_reshaped(r, kt)
                                    ks = ks or [None]
                                    scale = _scale_attr(f0 * f1 * f2, t.dtype)
                                    if scale is None:
                                        continue
                                    out.extend((q, k, kt, v, m, scale, zero) for k in ks)
    return out


def _batch_reshaped(r: _Reader, kt) -> list:
    """k for kt = Reshape(Transpose(Reshape(k), last two swapped)) where both reshapes change the
    batch dims only (the dynamo exports' 3-D bmm of kᵀ): kt = transpose(k) over the last two
    axes, each [S, D] matrix kept whole and in order by the reshapes."""
    tk = r.type(kt)
    out = []
    for n1 in r.nodes(kt, Op.RESHAPE):
        y = n1.children[0]
        ty = r.type(y)
        if ty is None or ty.rank < 2 or ty.shape[-2:] != tk.shape[-2:]:
            continue
        for n2 in r.nodes(y, Op.TRANSPOSE):
            z = n2.children[0]
            if n2.attrs["perm"] != _swap_last(ty.rank):
                continue
            for n3 in r.nodes(z, Op.RESHAPE):
                k = n3.children[0]
                t4 = r.type(k)
                if t4 is not None and t4.rank == tk.rank and tuple(t4.shape) == tuple(tk.shape[:-2]) + \
                        (tk.shape[-1], tk.shape[-2]) and r.type(z).shape[-2:] == t4.shape[-2:] and k not in out:
                    out.append(k)
    return out


def _repeated(r: _Reader, kc):
    """(u, groups) for each K/V repeated over query-head groups in the class: HF's repeat_kv,
    Reshape(Expand(u [B, A, 1, S, D] -> [B, A, G, S, D]) -> [B, A·G, S, D])."""
    tk = r.type(kc)
    if tk is None or tk.rank != 4:
        return
    for c in r.same(kc):
        for n in r.nodes(c, Op.RESHAPE):
            e = n.children[0]
            te = r.type(e)
            if te is None or te.rank != 5 or te.shape[2] < 2:
                continue
            b, heads, groups, s, d = te.shape
            if tuple(tk.shape) != (b, heads * groups, s, d):
                continue
            for x in r.nodes(e, Op.EXPAND):
                u = x.children[0]
                tu = r.type(u)
                if tu is not None and tuple(tu.shape) == (b, heads, 1, s, d):
                    yield u, groups


def _grouped_mask(r: _Reader, m, heads):
    """The mask for the grouped form's scores [B, A, G, Sq, Sk], or False where it has none."""
    if m is None:
        return None
    tm = r.type(m)
    if tm.rank <= 2 or (tm.rank == 3 and tm.shape[0] == 1):
        return m  # broadcast over every leading dim alike
    if tm.rank == 4 and tm.shape[1] == 1:
        return Term(Op.UNSQUEEZE, (m,), {"axes": (1,)})
    return False


def grouped_terms(session, r: _Reader, cid) -> int:
    """GQA over the un-repeated K/V: attention(q, repeat(k), repeat(v), m) [B, H, Sq, Dv] =
    Reshape(attention(Reshape(q, [B, A, G, Sq, D]), k [B, A, 1, Sk, D], v .., m'), [B, H, Sq, Dv]),
    head h = a·G + g reading K/V head a, as repeat_kv's Expand and Reshape order them."""
    t = r.type(cid)
    if t is None or t.rank != 4:
        return 0
    unions = 0
    for a in r.nodes(cid, Op.ATTENTION):
        q, k, v = a.children[:3]
        m = a.children[3] if len(a.children) > 3 and a.children[3] >= 0 else None
        tq = r.type(q)
        if tq is None or tq.rank != 4 or tq.shape[:2] != t.shape[:2]:
            continue
        mask = _grouped_mask(r, m, t.shape[1])
        if mask is False:
            continue
        for uk, gk in _repeated(r, k):
            for uv, gv in _repeated(r, v):
                tu = r.type(uk)
                if gk != gv or r.type(uv).shape[:2] != tu.shape[:2] or tu.shape[1] * gk != t.shape[1] \
                        or tu.shape[0] != tq.shape[0]:
                    continue
                b, heads = tq.shape[0], tu.shape[1]
                qg = Term(Op.RESHAPE, (q,), {"shape": (b, heads, gk, *tq.shape[2:])})
                att = Term(Op.ATTENTION, (qg, uk, uv, mask), dict(a.attrs))
                session.union(cid, Term(Op.RESHAPE, (att,), {"shape": tuple(t.shape)}))
                unions += 1
                break
            else:
                continue
            break
    return unions


def attention_terms(session, data: EGraphData) -> int:
    r = _Reader(data)
    transposes = {(n.children[0], n.attrs["perm"]): cid for cid, cls in data.classes.items()
                  for n in cls.nodes if n.op is Op.TRANSPOSE}
    unions = 0
    for cid in sorted(data.classes):
        if not any(r.type(n.children[0]) is not None and r.type(n.children[0]).rank == 5
                   for c in r.nodes(cid, Op.RESHAPE) for n in r.nodes(c.children[0], Op.ATTENTION)):
            unions += grouped_terms(session, r, cid)
        have = {(n.children, n.attrs["scale"], None) for n in r.nodes(cid, Op.ATTENTION)}
        have |= {(a.children, a.attrs["scale"], w.children[1]) for w in r.nodes(cid, Op.WHERE)
                 for a in r.nodes(w.children[2], Op.ATTENTION)}
        added = 0
        for q, k, kt, v, m, scale, zero in _forms(r, cid):
            if added >= MAX_FORMS:
                break
            perm = _swap_last(r.type(kt).rank)
            if k is None:
                k = transposes.get((kt, perm))
            kids = (q, k, v) if m is None else (q, k, v, m)  # an export leaves trailing absent inputs out
            if k is not None and (kids, scale, zero) in have:
                continue
            kterm = k if k is not None else Term(Op.TRANSPOSE, (kt,), {"perm": perm})
            att = Term(Op.ATTENTION, (q, kterm, v, m), {"scale": scale, "causal": 0})
            session.union(cid, att if zero is None else Term(Op.WHERE, (Term(Op.ISNAN, (att,)), zero, att)))
            have.add((kids, scale, zero))
            unions += 1
            added += 1
    return unions


def attention_generator() -> Generator:
    return Generator("attention", "softmax(q @ kᵀ · s + mask) @ v = attention(q, k, v, mask; s)  (s a scalar "
                     "weight: · s, s ·, / s, or split over q and kᵀ; PyTorch's where(isnan(p), 0, p) when "
                     "the mask is finite; else the guard on the output; GQA's repeated K/V read back as the "
                     "rank-5 grouped form)", attention_terms)


def _expand(r: int, masked: bool) -> str:
    mask = "m" if masked else NO_INPUT
    lhs = pat.attention("q", "k", "v", mask, scale="s", causal=0)
    scores = f"(Matmul q {pat.transpose('k', perm=_swap_last(r))})"
    scaled = f"(Mul {scores} (Fill s (vec-empty) dt))"
    if masked:
        scaled = f"(Add {scaled} m)"
    rhs = f"(Matmul {pat.softmax(scaled, axis=r - 1)} v)"
    facts = [f"(= t {lhs})", rank("q", r), rank("k", r), rank("v", r), dtype("q", "dt")]
    if masked:  # m a tensor, not (Absent)
        facts.append(shape("m", "sm"))
    return rule(facts, [f"(union t {rhs})"])


def attention_rules() -> Ruleset:
    return Ruleset("attention", (
        Rule("attention-expand", "attention(q, k, v, mask; s) = softmax(q @ kᵀ · s + mask) @ v  (not causal)",
             "\n".join(_expand(r, masked) for r in (2, 3, 4) for masked in (False, True))),
    ), first_steps=1)
