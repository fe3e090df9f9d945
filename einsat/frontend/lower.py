"""Lowering a functionalized program to an `ir.Graph`.

Statements map one to one onto nodes: ops stay ops, Access / Assign become `access` / `assign`
nodes (their spec an attribute, their dynamic indices inputs), and Loop / If become `loop` /
`if_` nodes whose bodies are graphs. A body's free values become explicit *captured* inputs
(the node passes the outer values); constants become weights of the graph that reads them.
Output values are renamed to the names the user sees (`out`, `out0`, ..., `<input>_out`).
"""

from __future__ import annotations

from einsat.frontend.program import (
    AccessStmt,
    AssignStmt,
    Block,
    IfStmt,
    LoopStmt,
    MutateStmt,
    OpStmt,
    Program,
    UpdateStmt,
    ViewStmt,
    defined,
)
from einsat.ir.graph import Graph, Node
from einsat.ir.registry import Op


def free_values(block: Block, constants) -> list[str]:
    """Values a block reads but does not define (nor gets as parameters), in first-use order."""
    inside = set(block.params)
    free: dict[str, None] = {}

    def need(name: str) -> None:
        if name and name not in inside and name not in constants:
            free.setdefault(name, None)

    for s in block.stmts:
        if isinstance(s, LoopStmt):
            for x in (s.trip, *s.inits, *free_values(s.body, constants)):
                need(x)
        elif isinstance(s, IfStmt):
            for x in (s.cond, *free_values(s.then, constants), *free_values(s.other, constants)):
                need(x)
        else:
            for x in s.inputs:
                need(x)
        inside.update(defined(s))
    for r in block.returns:
        need(r)
    return list(free)


def _graph(program: Program, block: Block, inputs: list[str], outputs: list[str], name: str) -> Graph:
    nodes = [_node(program, s, name) for s in block.stmts]
    used = {i for n in nodes for i in n.inputs} | set(outputs)
    weights = {c: a for c, a in program.constants.items() if c in used}
    return Graph(nodes, {i: program.types[i] for i in inputs}, outputs, weights, name)


def _node(program: Program, s, scope: str) -> Node:
    if isinstance(s, OpStmt):
        return Node(s.op, s.inputs, s.outputs, s.attrs)
    if isinstance(s, AccessStmt):
        return Node(Op.ACCESS, [s.base, *s.dyn], [s.out], {"spec": s.spec})
    if isinstance(s, AssignStmt):
        return Node(Op.ASSIGN, [s.base, s.source, *s.dyn], [s.out], {"spec": s.spec})
    if isinstance(s, LoopStmt):
        captured = free_values(s.body, program.constants)
        name = s.outputs[0] if s.outputs else f"{scope}/loop"
        body = _graph(program, s.body, [*s.body.params, *captured], s.body.returns, f"{name}/body")
        return Node(Op.LOOP, [s.trip, *s.inits, *captured], s.outputs,
                    {"body": body, "n_carried": len(s.inits)}, name)
    if isinstance(s, IfStmt):
        captured = list(dict.fromkeys(free_values(s.then, program.constants)
                                      + free_values(s.other, program.constants)))
        name = s.outputs[0] if s.outputs else f"{scope}/if"
        then = _graph(program, s.then, captured, s.then.returns, f"{name}/then")
        other = _graph(program, s.other, captured, s.other.returns, f"{name}/else")
        return Node(Op.IF, [s.cond, *captured], s.outputs,
                    {"then_branch": then, "else_branch": other}, name)
    raise TypeError(f"cannot lower {type(s).__name__}: functionalize the program first")


def name_outputs(program: Program) -> Program:
    """Give the outputs their user-facing names: rename the value when a top-level statement
    defines it for this output alone, else add an identity node."""
    top = {o: s for s in program.body.stmts for o in defined(s)}
    taken = set(program.types)
    mapping: dict[str, str] = {}
    outputs = []
    for value, want in zip(program.outputs, program.output_names):
        if value == want and want not in outputs:  # e.g. an input returned as itself
            outputs.append(want)
            continue
        while want in taken:
            want += "_"
        taken.add(want)
        program.types[want] = program.types[value]
        if value in top and value not in mapping and program.outputs.count(value) == 1:
            mapping[value] = want
        else:
            program.body.stmts.append(OpStmt(Op.IDENTITY, [value], [want], {}))
        outputs.append(want)
    _substitute(program.body, mapping)
    program.outputs = outputs
    return program


def _substitute(block: Block, m: dict[str, str]) -> None:
    def r(x):
        return m.get(x, x)
    block.params = [r(x) for x in block.params]
    block.returns = [r(x) for x in block.returns]
    for s in block.stmts:
        if isinstance(s, OpStmt):
            s.inputs, s.outputs = [r(x) for x in s.inputs], [r(x) for x in s.outputs]
        elif isinstance(s, (AccessStmt, AssignStmt)):
            s.out, s.base, s.dyn = r(s.out), r(s.base), [r(x) for x in s.dyn]
            if isinstance(s, AssignStmt):
                s.source = r(s.source)
        elif isinstance(s, LoopStmt):
            s.trip, s.inits, s.outputs = r(s.trip), [r(x) for x in s.inits], [r(x) for x in s.outputs]
        elif isinstance(s, IfStmt):
            s.cond, s.outputs = r(s.cond), [r(x) for x in s.outputs]
        for b in getattr(s, "blocks", ()):
            _substitute(b, m)


def to_graph(program: Program) -> Graph:
    """The `ir.Graph` of a functionalized program (no View, Mutate or Update left)."""
    if any(isinstance(s, (ViewStmt, MutateStmt, UpdateStmt)) for s, _ in program.walk()):
        raise TypeError("to_graph needs a functionalized program")
    name_outputs(program)
    return _graph(program, program.body, program.inputs, program.outputs, program.name)
