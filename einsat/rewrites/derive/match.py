"""Operator matching (EinNet §5.1): a scope as a vendor operator, by the iterator mapping table.

A scope L_{loops} Σ_{sums} c · I0[τ0] · I1[τ1] is classified by where each iterator appears
(Table 2): in both operands and the output (`batch`), in I0 and the output (`m`), in I1 and the
output (`n`), in both operands only (`k`). Each operator of the table accepts some groups and
some shapes of subscripts:

- matmul / batchmatmul: batch, m, n, k; subscripts are free, but the operands are re-laid out
  as [batch, m, k] and [batch, k, n] (`layouts`), which must be injective: a copy or a view,
  never a duplication (an activation duplicated is im2col, an eOperator bigger than its input;
  a weight duplicated is a scatter of zeros that the operator then multiplies);
- conv: m = the images and their output pixels, n = the filters, k = the channels and the taps;
  a spatial subscript of I0 is a window `a·o + b·r + c` (stride a, dilation b, padding from c);
- g2bmm: batch, one row iterator m, one band iterator w (in I1 only), k; I1's row subscript is
  `c·(m + D·(w − W)) + (batch)`, so the band has dilation D (the row layout is a DLT).

`mismatch(scope, const)` counts what keeps a scope from matching any of them (EinNet's
expression distance: converging derivation only takes steps that lower it): iterators in no
group, and subscripts that read an element twice other than a conv window of I0 or a band row
of I1; `matches(...)`
lists the matches, best first (fewest copies of non-constant operands).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from einsat.ir.expr.index import Index, var
from einsat.ir.expr.nodes import Const, Expr, Iter, Read, products
from einsat.ir.groups import MATCHED
from einsat.ir.registry import Op
from einsat.rewrites.derive.layouts import Axis, Free, Layout, free, group

Shapes = Sequence[Sequence[int]]


@dataclass(frozen=True)
class Match:
    op: Op
    attrs: dict = field(hash=False)
    operands: tuple[Layout, ...]
    out: tuple[Axis, ...]          # the operator's output axes, in its layout
    scale: float = 1.0
    crop: tuple[int, ...] = ()     # output sizes to keep, when the operator computes more

    def copies(self, shapes: Shapes, const: frozenset[int]) -> int:
        """Operands that are not weights and need more than a view (a transpose or an eOperator)."""
        out = 0
        for lay in self.operands:
            perm = lay.permutation(shapes[lay.src])
            if lay.src not in const and (perm is None or perm != tuple(sorted(perm))):
                out += 1
        return out


@dataclass
class _Parts:
    scale: float
    reads: tuple[Read, Read]


def _factors(e: Expr) -> _Parts | None:
    terms = products(e.body) if e.reduce == "sum" else None
    if not terms or len(terms) != 1:
        return None
    scale, reads = 1.0, []
    for f in terms[0]:
        if isinstance(f, Const):
            scale *= f.value
        elif isinstance(f, Read) and isinstance(f.src, int):
            reads.append(f)
        else:
            return None
    return _Parts(scale, tuple(reads)) if len(reads) == 2 else None


def _uses(r: Read) -> set[str]:
    return {n for i in r.idx for n in i.iterators()}


def injective(idx: Sequence[Index], ranges) -> bool:
    """Whether distinct iterator points read distinct elements: each subscript affine in
    iterators no other subscript uses, with mixed-radix coefficients (D·q + p, p < D)."""
    seen: set[str] = set()
    for i in idx:
        if not i.is_affine():
            return False
        names = [a for a, _ in i.terms]
        if seen & set(names):
            return False
        seen |= set(names)
        reach = 0
        for a, c in sorted(i.terms, key=lambda t: abs(t[1])):
            if abs(c) <= reach:
                return False
            lo, hi = ranges[a]
            reach += abs(c) * (hi - lo - 1)
    return True


def _in_order(iters: Sequence[Iter], *reads: Read) -> tuple[Iter, ...]:
    """The iterators ordered by their first subscript in the reads."""
    pos = {}
    for r in reads:
        for d, i in enumerate(r.idx):
            for a, _ in i.terms:
                if isinstance(a, str):
                    pos.setdefault(a, (len(pos), d))
    return tuple(sorted(iters, key=lambda it: pos.get(it.name, (1 << 30, 0))))


def mismatch(e: Expr, const: frozenset[int]) -> int:
    """EinNet's expression distance: the fewest violations of any operator's pattern (0: some
    operator matches; large when the body is not a product of two reads)."""
    parts = _factors(e)
    if parts is None:
        return 1 << 20
    return min(_violations(e, parts, i0, i1, const) for i0, i1 in (parts.reads, parts.reads[::-1]))


def _violations(e: Expr, parts: _Parts, i0: Read, i1: Read, const) -> int:
    ua, ub = _uses(i0), _uses(i1)
    bad = sum(1 for it in e.sums if not (it.name in ua and it.name in ub))
    bad += sum(1 for it in e.loops if it.name not in ua | ub)
    ranges = e.ranges()
    band = {it.name for it in e.loops if it.name in ub and it.name not in ua}
    band = band if len(band) == 1 else set()  # g2bmm has one band iterator
    duplicates = 0
    for r in (i0, i1):
        for i in r.idx:
            if not injective([i], ranges):
                excused = _window(i, e) is not None if r is i0 else len(i.iterators() & band) == 1
                duplicates += 0 if excused else 1
    return bad + duplicates


def _window(i: Index, e: Expr):
    """(o, a, r, b, c) when `i` is a·o + b·r + c, o a traversal and r a summation (or r None)."""
    if not i.is_affine():
        return None
    loops = {it.name for it in e.loops}
    sums = {it.name for it in e.sums}
    o = [(a, c) for a, c in i.terms if a in loops]
    r = [(a, c) for a, c in i.terms if a in sums]
    if len(o) != 1 or len(r) > 1 or o[0][1] <= 0 or (r and r[0][1] <= 0):
        return None
    return o[0][0], o[0][1], (r[0][0] if r else None), (r[0][1] if r else 1), i.const


def matches(e: Expr, shapes: Shapes, const: frozenset[int]) -> list[Match]:
    """Every way to run scope `e` as one operator, best first."""
    parts = _factors(e)
    if parts is None:
        return []
    out: list[Match] = []
    for i0, i1 in (parts.reads, parts.reads[::-1]):
        if _violations(e, parts, i0, i1, const):
            continue
        for finder in (_matmul, _conv, _g2bmm):
            m = finder(e, parts, i0, i1, shapes, const)
            if m is not None:
                out.append(m)
    out.sort(key=lambda m: (m.copies(shapes, const), PREFERENCE.index(m.op)))
    return out


PREFERENCE = MATCHED  # on ties, the registry's `matched` rank: a 1×1 conv is a matmul


def _groups(e: Expr, i0: Read, i1: Read):
    ua, ub = _uses(i0), _uses(i1)
    batch = [it for it in e.loops if it.name in ua and it.name in ub]
    m = [it for it in e.loops if it.name in ua and it.name not in ub]
    n = [it for it in e.loops if it.name in ub and it.name not in ua]
    return batch, m, n


def _injective_or_const(r: Read, ranges, const) -> bool:
    """Operands are laid out without duplication: a weight scattered into a bigger operand
    would only multiply zeros (a transposed conv as one dense matmul)."""
    return injective(r.idx, ranges)


def _matmul(e, parts, i0, i1, shapes, const) -> Match | None:
    batch, m, n = _groups(e, i0, i1)
    ranges = e.ranges()
    if not (_injective_or_const(i0, ranges, const) and _injective_or_const(i1, ranges, const)):
        return None
    act = i0 if i0.src not in const else i1
    batch, m, n = _in_order(batch, i0, i1), _in_order(m, i0), _in_order(n, i1)
    k = _in_order(e.sums, act, i0, i1)
    if batch:
        a = Layout(i0.src, i0.idx, (group(batch), group(m), group(k)))
        b = Layout(i1.src, i1.idx, (group(batch), group(k), group(n)))
        return Match(Op.BATCHMATMUL, {}, (a, b), (group(batch), group(m), group(n)), parts.scale)
    # n-iterators of I1 before its first k subscript become a broadcast batch (x [N, C, HW])
    first_k = min((d for d, i in enumerate(i1.idx) if i.iterators() & {it.name for it in k}), default=0)
    lead = {n_ for d, i in enumerate(i1.idx) if d < first_k for n_ in i.iterators()}
    nb = tuple(it for it in n if it.name in lead)
    nr = tuple(it for it in n if it.name not in lead)
    a = Layout(i0.src, i0.idx, (group(m), group(k)))
    if nb:
        b = Layout(i1.src, i1.idx, (group(nb), group(k), group(nr)))
        return Match(Op.MATMUL, {}, (a, b), (group(nb), group(m), group(nr)), parts.scale)
    b = Layout(i1.src, i1.idx, (group(k), group(n)))
    return Match(Op.MATMUL, {}, (a, b), (group(m), group(n)), parts.scale)


def _conv(e, parts, x, w, shapes, const) -> Match | None:
    batch, m, f = _groups(e, x, w)
    if batch:
        return None
    xshape = shapes[x.src]
    loops, sums = {it.name for it in m}, {it.name for it in e.sums}
    images, channels, spatial = [], [], []
    for d, i in enumerate(x.idx):
        single = i.terms[0][0] if len(i.terms) == 1 and i.terms[0][1] == 1 and i.const == 0 else None
        win = _window(i, e)
        if single in loops:
            images.append(e.iterator(single))
        elif single in sums:
            channels.append(e.iterator(single))
        elif win is not None:
            spatial.append((d, win))
        else:
            return None
    outs = [it.name for it in images] + [s[1][0] for s in spatial]
    taps = [it.name for it in channels] + [s[1][2] for s in spatial if s[1][2]]
    if not spatial or sorted(outs) != sorted(loops) or sorted(taps) != sorted(sums):
        return None
    stride, dilation, begins, ends, kernel_axes, out_axes, crop = [], [], [], [], [], [], []
    x_axes: list[Axis] = [group(images), group(channels)]
    for d, (o, a, r, b, c) in spatial:
        ot = e.iterator(o)
        rt = e.iterator(r) if r else Iter("_", 0, 1)
        pb = -(a * ot.lo + b * rt.lo + c)
        if pb < 0:
            return None
        k = rt.size
        pe = max(0, (ot.size - 1) * a + b * (k - 1) + 1 - xshape[d] - pb)
        full = (xshape[d] + pb + pe - b * (k - 1) - 1) // a + 1
        stride.append(a)
        dilation.append(b)
        begins.append(pb)
        ends.append(pe)
        x_axes.append(free(f"x{d}", 0, xshape[d], d))
        kernel_axes.append(group([rt] if r else []))
        out_axes.append(group([ot]))
        crop.append(full != ot.size)
    xl = Layout(x.src, x.idx, tuple(x_axes))
    wl = Layout(w.src, w.idx, (group(_in_order(f, w)), group(channels)) + tuple(kernel_axes))
    free_ranges = {f"x{d}": (0, xshape[d]) for d, _ in spatial}
    if x.src not in const and not injective(xl.subscripts(), {**e.ranges(), **free_ranges}):
        return None
    attrs = {"stride": tuple(stride), "dilation": tuple(dilation), "padding": tuple(begins + ends), "groups": 1}
    out = (group(images), group(_in_order(f, w))) + tuple(out_axes)
    return Match(Op.CONV, attrs, (xl, wl), out, parts.scale,
                 crop=tuple(ax.size for ax in out) if any(crop) else ())


def _g2bmm(e, parts, a, b, shapes, const) -> Match | None:
    batch, m_only, band = _groups(e, a, b)
    if m_only or len(band) != 1 or band[0].size % 2 == 0:
        return None
    w = band[0]
    width = (w.size - 1) // 2
    row_dims = [d for d, i in enumerate(b.idx) if w.name in i.iterators()]
    if len(row_dims) != 1 or not b.idx[row_dims[0]].is_affine():
        return None
    rd = row_dims[0]
    ri = b.idx[rd]
    cw = ri.coef(w.name)
    ranges = e.ranges()
    for m in (it for it in batch if ri.coef(it.name) > 0):
        cm = ri.coef(m.name)
        if cw <= 0 or cw % cm:
            continue
        dil = cw // cm
        zs = [it for it in batch if it is not m]
        rest = ri - var(m.name) * cm - var(w.name) * cw
        if not rest.iterators() <= {it.name for it in zs}:
            continue
        u = f"u{rd}"
        row = var(u) * cm + cm * m.lo + cw * (w.lo + width) + rest
        zs, ks = _in_order(zs, a, b), _in_order(e.sums, a, b)
        al = Layout(a.src, a.idx, (group(zs), group([m]), group(ks)))
        bl = Layout(b.src, b.idx, (group(zs), free(u, 0, m.size, rd, row), group(ks)))
        if not _rows_outside_are_zero(bl, shapes[b.src], m.size, dil * width):
            continue
        if not (_injective_or_const(a, ranges, const) and
                (b.src in const or injective(bl.subscripts(), {**ranges, u: (0, m.size)}))):
            continue
        return Match(Op.G2BMM, {"width": width, "dilation": dil}, (al, bl), (group(zs), group([m]), group([w])),
                     parts.scale)
    return None


def _rows_outside_are_zero(bl: Layout, shape, rows: int, reach: int) -> bool:
    """G2BMM reads the band rows outside [0, rows) as 0: so must the expression (its row
    subscript may leave b there only where b is padding)."""
    from einsat.rewrites.derive.support import supports
    row = next(a for a in bl.axes if isinstance(a, Free))
    lo, hi = -reach, rows + reach
    wide = Free(Iter(row.it.name, lo, hi), row.dim, row.index)
    probe = Layout(bl.src, bl.idx, tuple(wide if a is row else a for a in bl.axes)).expression()
    slo, shi = supports(probe.body, probe.ranges(), [shape])[row.it.name]
    slo, shi = max(slo, lo), min(shi, hi)
    return slo >= shi or (slo >= 0 and shi <= rows)
