"""Finding PET's forms in an exported e-graph, and running the generator on a program."""

from einsat.egraph import Limits, Schedule, Session
from einsat.egraph.data import ABSENT
from einsat.ir import Op
from einsat.rewrites.mutate.generate import mutate_generator

PLUMBING = (Op.RESHAPE, Op.TRANSPOSE, Op.SLICE, Op.SPLIT, Op.IDENTITY, Op.CORRECT)


def session_with(graph, cost, **limits) -> tuple[Session, object]:
    """A session holding `graph` after the mutation generator ran (alone) under `limits`."""
    s = Session(Limits(**{"generator_s": 120.0, "time_s": 300.0, **limits}), cost=cost)
    s.add_graph(graph)
    report = s.run(Schedule((mutate_generator(),)))
    return s, report


def behind(data, cid: int, op: Op) -> list:
    """The `op` e-nodes reached from e-class `cid` through views, slices, splits and the mutant
    side of corrections (PET's form: L⁻¹(Correct(op(L(x)), fix)), or split(op(concat(...)))),
    each with whether a `Correct` was on the way."""
    found, seen, stack = [], set(), [(cid, False)]
    while stack:
        c, corrected = stack.pop()
        if (c, corrected) in seen:
            continue
        seen.add((c, corrected))
        for n in data.classes[c].nodes:
            if n.op is op:
                found.append((n, corrected))
            elif n.op in PLUMBING and n.children:
                stack.append((n.children[0], corrected or n.op is Op.CORRECT))
    return found


def input_shape(data, node) -> tuple[int, ...]:
    return data.classes[node.children[0]].type.shape


def reads_inputs_through_views(data, node, names) -> bool:
    """The op's first input is computed from the graph inputs `names` by layout ops only."""
    stack, seen, leaves = [node.children[0]], set(), set()
    while stack:
        c = stack.pop()
        if c in seen or c == ABSENT:
            continue
        seen.add(c)
        for n in data.classes[c].nodes:
            if n.leaf is not None and n.leaf[0] == "input":
                leaves.add(n.leaf[1])
            elif n.op in (Op.RESHAPE, Op.TRANSPOSE, Op.PAD, Op.CONCAT):
                stack.extend(n.children)
    return set(names) <= leaves
