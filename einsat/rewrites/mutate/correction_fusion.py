"""Correction fusion in the e-graph (PET §5.3, Figure 6): the fully equivalent law of `fusion.py`,
applied to the convolutions of PET's corrections, so that it works across admissions and
extraction chooses between the fused and the separate forms.

    conv(a, W), conv(b, W) = split_axis(conv(concat_axis(a, 0_g, b), W))

A generator (the law needs the arithmetic of `fusion.join` on shapes and paddings, and a choice
of pairs that egglog patterns cannot bound): the *correction convolutions* are the convolutions
reached from a `correct` (or `fused_correct`) e-node's mutant and fix through layout e-nodes
(reshape, transpose, slice, pad, concat, split, ...; at most `DEPTH` of them): the fix convs of
every admission and the mutant convs they correct. Any two of them over one weight (and bias)
e-class are fused when the law joins them and neither's inputs or e-class reach the other: the
two e-classes are unioned with the pieces of the split of the fused conv.

Which pairs: the convolutions of one group, in e-class order c1, c2, ..., are fused as a chain,
as `fusion.fuse` does in a program: X2 = c1 + c_j (the first c_j the law joins with c1), then
X3 = X2 + the next one, and so on, one step a round per group (the next step needs the fused
conv's e-class). Extraction chooses any prefix of the chain, or none: the separate convolutions
stay in their e-classes. Figure 6 (the mutant conv and two fix convs) becomes one conv in two
rounds. The walk from the corrections does not pass through splits, so a fused conv is never a
chain's start: the growth is linear in the correction convolutions, not exponential.

Bounds and determinism: at most `MAX_PAIRS` new fusions a round, groups in e-class order; a
step taken in an earlier round (e-class c holds the split of the fused conv) is followed, not
taken again, so a round with nothing new reports no unions and saturation can stop.
"""

from __future__ import annotations

from einsat.egraph.data import ABSENT, EGraphData, ENode
from einsat.egraph.rules import Generator, Round
from einsat.egraph.terms import Term
from einsat.ir import groups
from einsat.ir.registry import Op, normalize_attrs, opdef
from einsat.rewrites.mutate.fusion import Join, join
from einsat.rewrites.post.fold import reachable

CORRECTIONS = groups.CORRECTIONS  # the registry's correction fact
DEPTH = 8
MAX_PAIRS = 16
COUNTS = ("correction convs", "pairs", "fused")


def correction_convs(data: EGraphData) -> list[tuple[int, ENode]]:
    """(e-class, conv e-node) of every correction convolution (see the module doc), sorted. The
    walk does not pass through splits: a fused conv is not a correction convolution itself."""
    frontier = sorted({c for cls in data.classes.values() for n in cls.nodes if n.op in CORRECTIONS
                       for c in n.children if c != ABSENT})
    seen = set(frontier)
    for _ in range(DEPTH):
        nxt = []
        for cid in frontier:
            for n in data.classes[cid].nodes:
                if n.op is not None and n.op is not Op.SPLIT and opdef(n.op).layout_only:
                    nxt += [c for c in n.children if c != ABSENT and c not in seen]
        seen.update(nxt)
        frontier = sorted(set(nxt))
    return [(cid, n) for cid in sorted(seen) for n in data.classes[cid].nodes if n.op is Op.CONV]


def fuse_corrections(session, data: EGraphData) -> Round:
    """One round of the generator: `fuse_convs` over the correction convolutions."""
    return fuse_convs(session, data, correction_convs(data))


def fuse_convs(session, data: EGraphData, convs: list[tuple[int, ENode]]) -> Round:
    """Each group of `convs` over one weight (and bias) grows its chain of fusions by one step,
    `MAX_PAIRS` steps at most (see the module doc)."""
    counts = dict.fromkeys(COUNTS, 0)
    counts["correction convs"] = len(convs)
    groups: dict[tuple[int, int], list[tuple[int, ENode]]] = {}
    for cid, n in convs:
        groups.setdefault((n.children[1], n.children[2] if len(n.children) > 2 else ABSENT), []).append((cid, n))
    reach: dict[int, set[int]] = {}

    def reaches(start: int, target: int) -> bool:
        if start not in reach:
            reach[start] = reachable(data, [start])
        return target in reach[start]

    unions = 0
    for key in sorted(groups):
        if counts["fused"] >= MAX_PAIRS:
            break
        members = groups[key]
        if len(members) < 2:
            continue
        (p, a), rest = members[0], members[1:]
        for q, b in rest:
            plan = _plan(data, p, a, q, b)
            if plan is None:
                continue
            counts["pairs"] += 1
            xa, xb = a.children[0], b.children[0]
            done = _fused(data, p, plan, xa, xb)
            if done is not None:  # this step of the chain was taken in an earlier round: follow it
                p, a = done
                continue
            if any(reaches(s, t) for s in (xa, xb, p, q) for t in (p, q) if s != t):
                continue
            conv = _fused_term(data, plan, a, xb)
            for k, cid in zip(plan.keep, (p, q)):
                session.union(cid, Term(Op.SPLIT, (conv,), {"axis": plan.axis, "sizes": plan.sizes}, output=k))
            unions += 2
            counts["fused"] += 1
            break  # the next step needs the fused conv's e-class: next round
    return Round(unions, counts)


def _plan(data: EGraphData, p: int, a: ENode, q: int, b: ENode) -> Join | None:
    if p == q:
        return None
    t = data.classes
    return join(t[a.children[0]].type.shape, a.attrs, t[p].type.shape,
                t[b.children[0]].type.shape, b.attrs, t[q].type.shape, t[a.children[1]].type.shape)


def _fused_term(data: EGraphData, plan: Join, a: ENode, xb: int) -> Term:
    """conv(concat(a's input, gap-padded b's input)) with the weight and bias of `a`."""
    x_type = data.classes[xb].type
    b_in = xb
    if plan.gap:
        b_in = Term(Op.PAD, (xb,), normalize_attrs(Op.PAD, {"pads": plan.gap_pads(x_type.rank)}, [x_type]))
    joined = Term(Op.CONCAT, (a.children[0], b_in), {"axis": plan.axis})
    return Term(Op.CONV, (joined,) + tuple(None if c == ABSENT else c for c in a.children[1:]), dict(plan.attrs))


def _fused(data: EGraphData, p: int, plan: Join, xa: int, xb: int) -> tuple[int, ENode] | None:
    """The e-class and e-node of the conv over concat(xa, xb or its gap pad) whose split e-class
    `p` already holds, or None."""
    cls = data.classes
    for s in cls[p].nodes:
        if s.op is not Op.SPLIT or s.output != plan.keep[0]:
            continue
        for c in cls[s.children[0]].nodes:
            if c.op is not Op.CONV:
                continue
            for cat in cls[c.children[0]].nodes:
                if cat.op is Op.CONCAT and len(cat.children) == 2 and cat.children[0] == xa:
                    second = cat.children[1]
                    if second == xb or any(n.op is Op.PAD and n.children[0] == xb for n in cls[second].nodes):
                        return s.children[0], c
    return None


def correction_fusion_generator(every: int = 1, first_steps: int | None = None) -> Generator:
    return Generator("correction-fusion", "conv(a, W), conv(b, W) = split(conv(concat(a, 0_gap, b), W)) "
                     "for the convolutions of PET's corrections", fuse_corrections, every, first_steps)
