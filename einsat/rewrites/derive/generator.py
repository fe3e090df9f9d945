"""The EinNet generator: every derived program of an operator unioned into the operator's e-class.

For each value of the source program computed by an operator with an expression that is
compute-intensive (conv, conv_transpose, g2bmm, gbmm, ...), the generator builds the expression
from the e-class's input types and attributes, runs the distance-guided search (`search`),
and enters each candidate program with `Session.add_subgraph`, its output unioned with the
operator's e-class. Inputs that are weights (computable from weights alone, `post.fold`) are
marked constant, so that their layouts may be anything (they fold) and kernel splits apply to
them. Only instantiated programs enter the e-graph; derivation states stay in Python.

Bounds: the search's own (`SearchLimits`: states, deadline, candidates per operator; the depth
is the session's `Limits.derive_depth`, EinNet's MaxDepth), at
most `max_ops` operators per round, each distinct operator (its expression, input types and
weights) searched once per process (results are memoized by fingerprint: ResNet's repeated
convolutions are one search). Deterministic: operators in e-class order, candidates ranked by
`rank` (default: `Candidate.key`; pass a cost model's `graph_cost` to rank by it), the
`max_candidates` slots going first to the best of each distinct program (`diverse`: variants
that differ only in a padding or a kernel split's axis come after).

In the default schedule (`default_derive_generator`) the search is bounded by work alone, so
that the same input gives the same e-graph on any machine: no deadline, at most
`DEFAULT_LIMITS.max_states` states per operator, and no new search in a round once its searches
have spent `Limits.derive_states` states (so a round derives at most that plus `max_states`; an
operator's states count whether its search ran now or was memoized), and
only for the operators where a derivation can pay (`can_pay`), the costliest first. What can
pay: EinNet's derived programs run GEMM-like operators (matmul, batched matmul, conv, G2BMM) of
about the source's work, plus memory-bound eOperators, and read the inputs and write the output
at least once; so a derivation can be cheaper only where the source costs more, under the
session's cost model, than `PAY_MARGIN` times the costlier of two floors (`floors`): the squarest
matmul of its FLOPs and a ReLU streaming its bytes. Under the roofline model no operator passes
(there an operator costs exactly the costlier floor); under a measured profile the operators
that run far below the GEMM or the memory rate do (EinNet's case: cuDNN's 3×3 convs on 7×7
images, 5×5 and transposed convs, dilated band products). The rank is then the session's cost model (`graph_cost`).
"""

from __future__ import annotations

from dataclasses import replace
from math import ceil
from typing import Callable
from weakref import WeakSet

from einsat.egraph.data import ABSENT, EGraphData, ENode
from einsat.egraph.rules import Generator
from einsat.ir.expr.measure import is_memory_bound
from einsat.ir.expr.printer import fingerprint
from einsat.ir.graph import Graph
from einsat.ir.groups import DERIVABLE
from einsat.ir.registry import Op, opdef
from einsat.ir.types import TensorType
from einsat.rewrites.derive.search import Candidate, SearchLimits, SearchReport, derive
from einsat.rewrites.post.fold import weight_only

DERIVED = DERIVABLE  # the ops whose derivations are searched: the registry's `derivable`
_MEMO: dict[tuple, SearchReport] = {}
_MEMO_LIMIT = 256
PAY_MARGIN = 1.25  # an operator must cost this many times its floors for a derivation to pay
DEFAULT_LIMITS = SearchLimits(max_states=400, deadline_s=float("inf"))  # EinNet's cases need 21-341 states
_DERIVED: WeakSet = WeakSet()  # the sessions into which a derivation entered


def derivable(node: ENode, data: EGraphData) -> bool:
    return node.op in DERIVED and all(c != ABSENT for c in node.children)


def search_node(node: ENode, data: EGraphData, const_classes, limits: SearchLimits) -> SearchReport | None:
    """The search for one operator e-node (memoized by its expression, types and weights)."""
    types = [data.classes[c].type for c in node.children]
    d = opdef(node.op)
    e = d.expression(types, node.attrs)
    if e is None or is_memory_bound(e, [t.shape for t in types]):
        return None
    const = frozenset(k for k, c in enumerate(node.children) if c in const_classes)
    key = (fingerprint(e), tuple(types), const, limits)
    if key not in _MEMO:
        if len(_MEMO) >= _MEMO_LIMIT:
            _MEMO.clear()
        outs = d.infer(types, node.attrs)
        _MEMO[key] = derive(e, types, const, limits, flops=d.flops(types, outs, node.attrs))
    return _MEMO[key]


def floors(node: ENode, data: EGraphData) -> list[tuple[Op, list[TensorType], list[TensorType]]]:
    """Two reference ops whose costs bound what any program of the operator's work must cost: a
    matmul [s, k] @ [k, s] of its FLOPs (the squarest GEMM: the fewest bytes for that work) and a
    ReLU streaming its bytes (its inputs read and its output written once)."""
    return floors_of(node.op, node.attrs, [None if c == ABSENT else data.classes[c].type for c in node.children])


def floors_of(op: Op, attrs, ins: list) -> list[tuple[Op, list[TensorType], list[TensorType]]]:
    """`floors` of an operator given by its op, attributes and input types (None: absent)."""
    d = opdef(op)
    outs = d.infer(ins, attrs)
    dt = outs[0].dtype
    flops = max(float(d.flops(ins, outs, attrs)), 2.0)
    side = max(1, round((flops / 2) ** (1 / 3)))
    k = max(1, ceil(flops / (2 * side * side)))
    gemm = (Op.MATMUL, [TensorType((side, k), dt), TensorType((k, side), dt)], [TensorType((side, side), dt)])
    n = max(1, ceil(d.bytes(ins, outs, attrs) / (2 * outs[0].dtype.itemsize)))
    stream = (Op.RELU, [TensorType((n,), dt)], [TensorType((n,), dt)])
    return [gemm, stream]


def can_pay(cost, node: ENode, data: EGraphData) -> float:
    """How much (in the cost model's unit) the operator costs above `PAY_MARGIN` times the
    costlier of its `floors`: a derivation can pay only where this is positive (see the module
    doc)."""
    ins = [None if c == ABSENT else data.classes[c].type for c in node.children]
    outs = opdef(node.op).infer(ins, node.attrs)
    floor = max(cost.node_cost(op, {}, f_ins, f_outs) for op, f_ins, f_outs in floors(node, data))
    return cost.node_cost(node.op, node.attrs, ins, outs) - PAY_MARGIN * floor


def _operators(session, data: EGraphData, select: bool) -> list[tuple[int, ENode]]:
    """The source program's derivable operators: in e-class order, or (with `select`) those
    that `can_pay` under the session's cost model, the costliest above its floors first."""
    found = []
    for cid in sorted(data.classes):
        cls = data.classes[cid]
        if cls.name is None:  # only values of the source program
            continue
        node = next((n for n in cls.nodes if derivable(n, data)), None)
        if node is not None:
            found.append((cid, node))
    if not select:
        return found
    if session.cost is None:
        return []
    excess = {cid: can_pay(session.cost, node, data) for cid, node in found}
    return sorted(((cid, n) for cid, n in found if excess[cid] > 0), key=lambda cn: (-excess[cn[0]], cn[0]))


def derive_programs(session, data: EGraphData, limits: SearchLimits, rank: Callable[[Graph], float] | None,
                    max_ops: int, select: bool = False, round_states: int | None = None) -> int:
    """One round: each operator's derived programs unioned into its e-class (see the module doc;
    `select` and `round_states`: the default schedule's selection and work bound)."""
    limits = replace(limits, max_depth=session.limits.derive_depth)
    if select and rank is None and session.cost is not None:
        rank = session.cost.graph_cost
    const_classes = weight_only(data)
    unions, done, states = 0, 0, 0
    for cid, node in _operators(session, data, select):
        if done >= max_ops or (round_states is not None and states >= round_states):
            break
        report = search_node(node, data, const_classes, limits)
        done += 1
        if report is None:
            continue
        states += report.states
        candidates = report.candidates
        if rank is not None:
            candidates = sorted(candidates, key=lambda c: (rank(c.graph), Candidate.key(c)))
        for cand in diverse(candidates, limits.max_candidates):
            inputs = {f"in{k}": child for k, child in enumerate(node.children)}
            session.add_subgraph(cand.graph, inputs, outputs=[cid])
            unions += 1
    if unions:
        _DERIVED.add(session)
    return unions


def work(g: Graph) -> tuple:
    """What a derived program computes, up to paddings and orientation: its kernels' ops and
    FLOPs (views and sources left out), sorted."""
    out = []
    for n in g.nodes:
        d = opdef(n.op)
        if d.view or d.source:
            continue
        ins, outs = g.node_types(n)
        try:
            flops = float(d.flops(ins, outs, n.attrs))
        except NotImplementedError:
            flops = 0.0
        out.append((n.op.value, round(flops)))
    return tuple(sorted(out))


def diverse(candidates: list[Candidate], k: int) -> list[Candidate]:
    """The first `k` of the ranked `candidates`, taking first the best of each distinct `work`
    and then the others in rank order. Variants of one program that differ in a padding or in
    which spatial axis a kernel split takes cost about the same under any cost model, so they
    crowd the slots: in the CPU benchmark at 8b5680d einnet_conv5x5's e-graph took four variants
    of a 3×5 convolution to 2 channels and two of a 2×5 one to 3 (measured 118–195 ms), and not
    the 1×5 convolution to 5 channels (about 70 ms), the derived program that runs 3.9× the source."""
    seen: set[tuple] = set()
    first, rest = [], []
    for c in candidates:
        w = work(c.graph)
        (rest if w in seen else first).append(c)
        seen.add(w)
    return (first + rest)[:k]


def derive_generator(limits: SearchLimits | None = None, rank: Callable[[Graph], float] | None = None,
                     max_ops: int = 64, every: int = 1, first_steps: int | None = 1) -> Generator:
    """EinNet's derivations as a generator (by default in the first step only: one search per
    operator), for every derivable operator of the source program."""
    lim = limits or SearchLimits()
    return Generator("einnet-derive", "op = an instantiated derivation of its expression (EinNet §4–§6)",
                     lambda session, data: derive_programs(session, data, lim, rank, max_ops),
                     every=every, first_steps=first_steps)


def default_derive_generator() -> Generator:
    """The default schedule's derivations: bounded by work, not time (deterministic), for the
    operators where a derivation can pay under the session's cost model (see the module doc)."""
    return Generator("einnet-derive", "op = an instantiated derivation of its expression (EinNet §4–§6), "
                     "where the op costs more than its floors (a GEMM of its FLOPs, a stream of its bytes)",
                     lambda session, data: derive_programs(session, data, DEFAULT_LIMITS, None, 64, select=True,
                                                           round_states=session.limits.derive_states),
                     every=1, first_steps=1)


def after_derivations(generator: Generator) -> Generator:
    """`generator` running only in sessions into which a derivation entered: the inter-expression
    generators (`inter`) work on derived programs, and need not scan the e-graphs of others."""
    def fn(session, data):
        return generator.fn(session, data) if session in _DERIVED else 0
    return replace(generator, fn=fn)
