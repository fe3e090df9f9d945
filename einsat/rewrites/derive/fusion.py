"""Fusion as a derivation: a producer-consumer chain of element-wise, broadcast and reduction ops
as one eOperator (EinNet §4.2 traversal merging, §5.2 eOperators), unioned beside the chain.

For each value of the source program computed by a fusable op (an element-wise op with an
expression, softmax, layernorm, reduce_sum / reduce_mean, a memory-bound eop), the generator
grows the chain that ends there in the source program (`Program`): a child joins when the source
computes it by a fusable op, it is no program output, holds no weights alone, and every source
value that reads it lies inside the chain (its value is needed nowhere else, so fusing it
removes its round trip to memory). Each join
composes the producer's expression into the consumer's (`ir.expr.compose`): element-wise
producers are inlined, reductions (a row's max, sum, mean, variance) stay scopes. A child that
is a one-element weight (a scale, an epsilon, GELU's 0.5) becomes a constant of the expression.
The chain's eop, over its external inputs, is unioned into the value's e-class when it merged at
least two ops and its reductions are over trailing dims, each read at its row (`row_form`: what
the row kernel runs; a softmax along a leading axis stays unfused); extraction decides by cost
whether it runs (under a roofline an unmeasured eop is charged its external inputs and output
once, and one launch).

A value the chain computes that is also read outside it (GPT-2's residual sum feeds its
layernorm and the next residual add) ends the plain chain there. For a norm or softmax chain
(reductions, `row_form`) the generator grows a second form in which such a member joins when it
is element-wise over the output's grid: the fused kernel writes it as a further output
(`eop_multi`, one expression per output over the same inputs; at most `MAX_SHARED` further
outputs). The eop_multi's outputs are unioned into the chain's e-class and into each shared
value's e-class; extraction pays the application once (one multi-output group, `extract.problem`),
so it wins where it saves the shared value's round trip and a launch. None is offered where an
input of the chain descends from a shared value in the source (the kernel would read what it
writes: a cycle).

Bounds: `MAX_OPS` ops per chain, `MAX_TERMS` terms per expression, `MAX_CHAINS` chains per
round; chains in e-class order, each op the source's own: deterministic. A fused eop
keeps its expression, so NumPy, verification and the GPU kernel work on it as on any eop; it
also carries its chain of source ops (`chain`, `provenance`: `ir.ops.eop_chain`), which its
ONNX export writes back as those ops' own ONNX forms (LayerNormalization, Softmax, Gelu, ...), so
a runtime that reads the file keeps its own kernels and graph fusions.

Half precision: a converted program computes its statistics in fp32 between casts
(`cast(layernorm(cast(x, f32)), bf16)`, `einsat.ir.precision`). A float cast between a half and
fp32 is the identity of a fused kernel, which loads half into float, computes in fp32 and rounds
once when it stores (an eop in half: `einsat.ir.expr.semantics`), so in a chain whose output is
half such a cast joins as the identity: the chain's eop reads and writes half and drops the
chain's inner roundings (casts and half results alike; the verification against the fp32 input
bounds them). An fp32 weight the chain reads (a layer norm's scale, kept fp32 by the conversion)
enters the eop cast to the half (weight-only: folded). In an fp32 chain no cast joins: a narrowing
cast there is a rounding the program asks for. Nor in fp16: its range (65504) makes the
roundings the conversion wrote part of the meaning, not noise. An exporter's attention mask
(finfo(float32).min, -65504 or -inf once in fp16) absorbs the scores when the fp16 add rounds, and
a fully masked row's softmax is uniform, as in fp32; computed in fp32 across the casts, the scores
show through (a row of 0.125 became 0.218 on the Llama prefill export). bf16 has fp32's range.

Targets: the fused eOperator pays where einsat's generated kernels run it (the GPU models); on
a target that runs the program through onnxruntime (whose cost model folds weights at load) an
eop runs as its ONNX expansion, slower than onnxruntime's own fused kernels, so the generator
adds nothing there.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from einsat.egraph.data import ABSENT, EGraphData, ENode
from einsat.egraph.rules import Generator
from einsat.egraph.terms import Term
from einsat.errors import EinsatError
from einsat.ir.expr.build import broadcast_read, iters
from einsat.ir.expr.compose import compose, constant_input, row_form, size
from einsat.ir.expr.measure import is_memory_bound
from einsat.ir.expr.nodes import Expr, inputs_used, relabel_inputs, scopes
from einsat.ir.expr.printer import fingerprint
from einsat.ir.groups import CHAIN_FUSABLE
from einsat.ir.ops.eop import join_expressions
from einsat.ir.ops.eop_chain import encode as encode_chain
from einsat.ir.registry import Op, opdef
from einsat.ir.types import TensorType, is_float
from einsat.rewrites.post.fold import weight_only

FUSABLE = CHAIN_FUSABLE  # the ops a chain may hold: the registry's chain_fusable fact
MAX_OPS = 16
MAX_TERMS = 400
MAX_CHAINS = 512
MAX_SHARED = 2  # further outputs of one fused chain (values also read outside it)
MAX_WALK = 20000  # source values `_feeds_back` visits before it gives up (and refuses)


def _half(dtype) -> bool:
    return is_float(dtype) and np.dtype(dtype).itemsize == 2


def _expression(node: ENode, data: EGraphData, out: TensorType | None, half: bool = False) -> Expr | None:
    """The node's expression when it is fusable: a float op of a known expression, memory-bound,
    whose result has its e-class's type `out` (an e-node that disagrees is left alone); in a
    chain whose output is `half`, also a cast between a half and fp32, as the identity."""
    if ABSENT in node.children or out is None:
        return None
    types = [data.classes[c].type for c in node.children]
    if any(t is None or not is_float(t.dtype) for t in types):
        return None
    if node.op is Op.CAST:  # a fused half kernel computes in fp32: widening to it, or rounding back, is its identity
        pair = {np.dtype(types[0].dtype), np.dtype(out.dtype)}
        if not half or len(pair) != 2 or np.dtype(np.float32) not in pair or not any(_half(d) for d in pair) \
                or np.dtype(np.float16) in pair or types[0].shape != out.shape:
            return None  # fp16: see the module doc
        loops = iters("o", out.shape)
        return Expr(loops, (), broadcast_read(0, out.shape, loops))
    if node.op not in FUSABLE:
        return None
    try:
        e = opdef(node.op).expression(types, node.attrs)
    except (NotImplementedError, ValueError, EinsatError):
        return None
    if e is None or e.shape != out.shape or not is_memory_bound(e, [t.shape for t in types]):
        return None
    return e


def _scalar(cid: int, data: EGraphData) -> float | None:
    """The value of a one-element weight e-class, else None."""
    for node in data.classes[cid].nodes:
        if node.leaf is not None and node.leaf[0] == "weight":
            w = np.asarray(data.weights[node.leaf[1]])
            if w.size == 1 and w.dtype.kind == "f":
                return float(w.reshape(()))
    return None


class Program:
    """The source program as the generator reads it: per value e-class, the e-node that computed
    it in the source (`producer`) and the value e-classes that read it there (`readers`). Taken
    from the session's source graphs by value name, so that the rules that ran before the
    generator in its step (a distributed product, a reassociated sum: alternatives, with
    readers of their own) neither pick the chain's e-nodes nor count as readers; without source
    graphs, from the e-graph's e-nodes of values."""

    def __init__(self, session, data: EGraphData):
        self.data = data
        self.producer: dict[int, ENode] = {}
        self.readers: dict[int, set[int]] = defaultdict(set)
        self.order: dict[int, int] = {}  # a value's position in its source program (topological)
        self.opaque: set[int] = set()  # values read by a source op the program does not record (multi-output)
        by_name = {cls.name: cid for cid, cls in data.classes.items() if cls.name is not None}
        for g in getattr(session, "sources", None) or ():
            for node in g.nodes:
                out = by_name.get(node.outputs[0]) if len(node.outputs) == 1 else None
                kids = [by_name.get(i) if i else ABSENT for i in node.inputs]
                if out is None or any(k is None for k in kids):
                    self.opaque.update(k for k in kids if k is not None and k != ABSENT)
                    continue
                self.producer.setdefault(out, ENode(node.op, tuple(kids), dict(node.attrs)))
                self.order.setdefault(out, len(self.order))
                for k in kids:
                    if k != ABSENT:
                        self.readers[k].add(out)
        self.dead: set[int] = set()  # values no longer read once recognized ops stand for their chains
        self.recognized: set[int] = set()  # values read as computed by a recognized op (`_read_recognized`)
        if self.producer:
            self._read_recognized({by_name[o] for g in getattr(session, "sources", None) or () for o in g.outputs
                                   if o in by_name})
        if not self.producer:  # no source graphs: every e-node of a value reads its children
            for cid, cls in data.classes.items():
                if cls.name is None:
                    continue
                self.producer[cid] = next((n for n in cls.nodes if n.op in FUSABLE), cls.nodes[0])
                for n in cls.nodes:
                    for c in n.children:
                        if c != ABSENT:
                            self.readers[c].add(cid)

    def _read_recognized(self, outputs: set[int]) -> None:
        """A value the recognitions found to be a GELU (`rewrites.algebra.gelu`: the exporter's
        erf chain; the tanh form has no expression, so no chain could hold it) is read as
        computed by its gelu e-node, and the chain's own values,
        read by nothing else, drop out of the program (`dead`: no chain ends there, none counts
        them as readers). So a fused chain holds the gelu and its file writes ONNX's Gelu, which
        onnxruntime runs as one kernel (BiasGelu with the bias add before it); fused as the
        exporter wrote it, the chain wrote Div, Erf, Add, Mul back, and where the chain's 0.5
        had moved into the next MatMul's weight (the modeled costs tie) no runtime found the
        GELU (ConvNext's 18: 0.94x on onnxruntime CPU)."""
        dropped: list[int] = []  # values a recognized op's value no longer reads
        for cid, node in list(self.producer.items()):
            if node.op is Op.GELU:
                continue
            cls = self.data.classes[cid]
            gelu = next((n for n in cls.nodes if n.op is Op.GELU and n.children[0] not in (cid, ABSENT)), None)
            if gelu is None or _expression(gelu, self.data, cls.type) is None:  # a chain cannot hold it
                continue
            self.producer[cid] = gelu
            self.recognized.add(cid)
            for k in node.children:
                if k != ABSENT and k not in gelu.children:
                    self.readers[k].discard(cid)
                    dropped.append(k)
            self.readers[gelu.children[0]].add(cid)
        # a value read by nothing now (nor by a source op the program does not record) that is
        # no output is dead, and so on up
        while dropped:
            k = dropped.pop()
            if k in self.dead or k in outputs or k in self.opaque or k not in self.producer or self.readers[k]:
                continue
            self.dead.add(k)
            for c in self.producer[k].children:
                if c != ABSENT:
                    self.readers[c].discard(k)
                    dropped.append(c)

    def fusable(self, cid: int, half: bool = False) -> tuple[ENode, Expr] | None:
        node = self.producer.get(cid)
        if node is None:
            return None
        e = _expression(node, self.data, self.data.classes[cid].type, half)
        if e is not None and node.op is Op.CAST and not _half(self.data.classes[node.children[0]].type.dtype) \
                and self.fusable(node.children[0], half) is None:
            return None  # a rounding to half of an fp32 value the chain cannot compute: no eop reads fp32
        return None if e is None else (node, e)


def chain(cid: int, program: Program, fixed: set[int], shared: bool = False, roots: frozenset[int] = frozenset()
          ) -> tuple[Expr, list[int], int, list[tuple[int, Expr]], dict[int, ENode]] | None:
    """(expression, external input e-classes, ops merged, further outputs, members) of the chain
    ending at e-class `cid` (see the module doc), or None when `cid` is not computed by a fusable
    op. `members` maps each merged value's e-class to the source e-node computing it.

    With `shared`, a member may also be read outside the chain when it is element-wise over the
    output's grid (a residual sum feeding a layernorm and the next residual add): it joins, and
    becomes a further output (its e-class, its expression over the chain's inputs), at most
    `MAX_SHARED` of them; the eop then writes it too (`eop_multi`). So may a program output
    among `roots` (a piece's residual sum that the next piece reads). A join after which an input
    of the chain descends from a further output is not made (a cycle, `_feeds_back`)."""
    data, consumers = program.data, program.readers
    half = data.classes[cid].type is not None and _half(data.classes[cid].type.dtype)
    start = program.fusable(cid, half)
    if start is None:
        return None
    node, e = start
    children: list[int] = list(node.children)
    members, ops = {cid: node}, 1
    extra: list[tuple[int, Expr]] = []  # (e-class, expression over `children`)
    grown = True
    while grown and ops < MAX_OPS:
        grown = False
        for k, c in enumerate(children):
            value = _scalar(c, data)
            if value is not None:
                e, rest, children = _compact_all(constant_input(e, k, value),
                                                 [constant_input(x, k, value) for _, x in extra], children)
                extra = [(ec, x) for (ec, _), x in zip(extra, rest)]
                grown = True
                break
            if c in members or (c in fixed and not (shared and c in roots)):
                continue
            outside = not consumers[c] <= members.keys() or c in roots
            if outside and (not shared or len(extra) >= MAX_SHARED):
                continue
            inner = program.fusable(c, half)
            if inner is None:
                continue
            inner_node, inner_e = inner
            if outside and (scopes(inner_e) or inner_e.shape != e.shape):
                continue  # a further output is element-wise over the output's grid
            base = len(children)
            ins = list(range(base, base + len(inner_node.children)))
            new = compose(e, k, inner_e, ins)
            rest = [compose(x, k, inner_e, ins) for _, x in extra]
            if outside:
                rest.append(relabel_inputs(inner_e, dict(enumerate(ins))))
            if size(new) > MAX_TERMS or any(scopes(x) or size(x) > MAX_TERMS for x in rest):
                continue
            e2, rest, children2 = _compact_all(new, rest, children + list(inner_node.children))
            extra2 = [(ec, x) for ec, x in zip([ec for ec, _ in extra] + ([c] if outside else []), rest)]
            if extra2 and _feeds_back(extra2, children2, program):
                continue  # an input would descend from a further output: the kernel would read what it writes
            e, children, extra = e2, children2, extra2
            members[c] = inner_node
            ops += 1
            grown = True
            break
    return e, children, ops, extra, members


def provenance(outputs: list[int], members: dict[int, ENode], children: list, data: EGraphData) -> str:
    """The `chain` attribute (`ir.ops.eop_chain`) of the eop fused from `members` over the
    external inputs `children`, writing the values `outputs` (e-classes): its ops in program
    order, each input a chain member, an external input or a folded one-element weight (in its
    own dtype). An input the eop reads cast to the half (`_in_dtype`: an fp32 weight of a half
    chain) is cast back first, as the eop reads it. Empty when an input is none of them (the
    expression dropped it) or an attribute has no text form: that eop exports as its expression."""
    order: list[int] = []

    def visit(c: int) -> None:  # members before their readers; a chain holds at most MAX_OPS
        if c in order:
            return
        for k in members[c].children:
            if k in members:
                visit(k)
        order.append(c)

    for c in outputs + sorted(members):
        visit(c)
    steps: list = []
    position: dict[int, tuple] = {}
    for k, c in enumerate(children):
        if isinstance(c, Term):  # Cast(weight, half): the source read the weight itself
            source = c.children[0]
            steps.append((Op.CAST, {"dtype": np.dtype(data.classes[source].type.dtype).name}, [("in", k)]))
            position[source] = ("op", len(steps) - 1)
        else:
            position[c] = ("in", k)
    index = {c: len(steps) + j for j, c in enumerate(order)}
    for c in order:
        refs = []
        for k in members[c].children:
            if k in index:
                refs.append(("op", index[k]))
            elif k in position:
                refs.append(position[k])
            else:
                value = _scalar(k, data)
                if value is None:
                    return ""
                t = data.classes[k].type
                refs.append(("const", value, list(t.shape), np.dtype(t.dtype).name))
        steps.append((members[c].op, members[c].attrs, refs))
    try:
        return encode_chain(steps, [index[c] for c in outputs])
    except TypeError:
        return ""


def _compact_all(e: Expr, rest: list[Expr], children: list) -> tuple[Expr, list[Expr], list]:
    """`compact` of several expressions over one list of inputs: each distinct child once, only
    the inputs some expression reads, renumbered in order."""
    first: dict = {}
    relabel = {k: first.setdefault(c, k) for k, c in enumerate(children)}
    exprs = [relabel_inputs(x, relabel) for x in (e, *rest)]
    used = sorted(set().union(*(inputs_used(x) for x in exprs)))
    order = {k: j for j, k in enumerate(used)}
    exprs = [relabel_inputs(x, order) for x in exprs]
    return exprs[0], exprs[1:], [children[k] for k in used]


def _feeds_back(extra: list[tuple[int, Expr]], children: list[int], program: Program) -> bool:
    """Whether a further output is an ancestor of one of the chain's inputs in the source (the
    eop would then read a value computed from its own output: a cycle). Walks up from the inputs
    through the source's producers, no further back than the further outputs' positions."""
    targets = {ec for ec, _ in extra}
    floor = min(program.order.get(ec, -1) for ec in targets)  # -1: no source order, no pruning
    stack, seen = list(children), set()
    while stack:
        c = stack.pop()
        if c in targets:
            return True
        if c in seen or -1 < program.order.get(c, -1) < floor:
            continue
        seen.add(c)
        if len(seen) > MAX_WALK:
            return True  # not shown acyclic within the bound: no eop_multi
        node = program.producer.get(c)
        if node is not None:
            stack.extend(k for k in node.children if k != ABSENT)
    return False


def fuse_chains(session, data: EGraphData) -> int:
    """One round: each fusable value's chain, when it merges two ops or more, unioned in as an
    eop (see the module doc)."""
    if getattr(session.cost, "folds_weights_at_load", False):
        return 0
    program = Program(session, data)
    const = set(weight_only(data))
    fixed = set(data.roots) | const
    unions = chains = 0
    for cid in sorted(data.classes):
        if chains >= MAX_CHAINS:
            break
        cls = data.classes[cid]
        if cls.name is None or cid in const or cid in program.dead:
            continue
        found = chain(cid, program, fixed)
        # a chain of two ops or more; or a recognized GELU alone, which stands for the exporter's
        # chain of five and is priced as that chain's eop was (one kernel, its input and output once)
        forms = [] if found is None or (found[2] < 2 and cid not in program.recognized) else [found]
        if found is not None and scopes(found[0]) and row_form(found[0]) is not None:
            # a norm or softmax also writing the sum it reads
            wide = chain(cid, program, fixed, shared=True, roots=frozenset(data.roots))
            if wide is not None and wide[3]:
                forms.append(wide)
        for e, children, _, extra, members in forms:
            out_t = cls.type
            children = _in_dtype(children, out_t.dtype, data, const)
            if not children:
                continue
            if scopes(e) and row_form(e) is None:
                continue  # reductions a row kernel cannot run (not over the trailing dims): no fused kernel pays
            chains += 1
            written = provenance([cid] + [ec for ec, _ in extra], members, children, data)
            if not extra:
                text = fingerprint(e)
                if any(n.op is Op.EOP and n.attrs.get("expr") == text and list(n.children) == children
                       for n in cls.nodes):
                    continue
                session.union(cid, Term(Op.EOP, tuple(children), {"expr": text, "chain": written}))
                unions += 1
                continue
            text = join_expressions([e] + [x for _, x in extra])
            if any(n.op is Op.EOP_MULTI and n.attrs.get("exprs") == text for n in cls.nodes):
                continue
            for k, target in enumerate([cid] + [ec for ec, _ in extra]):
                session.union(target, Term(Op.EOP_MULTI, tuple(children), {"exprs": text, "chain": written},
                                           output=k))
            unions += 1
    return unions


def _in_dtype(children: list[int], dt, data: EGraphData, const: set[int]) -> list | None:
    """The chain's inputs in its output's dtype `dt`: each as it is, or in a half chain an fp32
    weight-only input cast to the half (a layer norm's scale; folded where weights are); None
    when an input has another dtype."""
    out: list = []
    for c in children:
        t = data.classes[c].type
        if t.dtype == dt:
            out.append(c)
        elif _half(dt) and c in const and np.dtype(t.dtype) == np.float32:
            out.append(Term(Op.CAST, (c,), {"dtype": np.dtype(dt).name}))
        else:
            return None
    return out


def fusion_generator(every: int = 1, first_steps: int | None = 1) -> Generator:
    """Fusion of element-wise, broadcast and reduction chains into eOperators (see the module doc)."""
    return Generator("eop-chain-fusion",
                     "f(g(h(x))) = eop(x): a chain of element-wise and reduction ops as one eOperator "
                     "(EinNet §4.2 traversal merging)", fuse_chains, every=every, first_steps=first_steps)
