"""BlockPropagation and renaming (TensorSSA Algorithm 1, lines 17-35).

An `Update(x', x)` inside a Loop or If body whose `x` is defined outside it is a mutation
crossing control flow. For every control statement N and every such outer `x`:

  - x joins the returns of N's blocks: for an If, of *both* branches (the sibling returns the
    outer x unchanged when it does not update it); a new output x0 of N and `Update(x0, x)`
    after N;
  - for a Loop, x also becomes a block argument: x joins N's inputs (the initial value), a new
    parameter xp joins the body's parameters and `Update(xp, x)` opens the body, so that each
    iteration reads the previous one's version.

Nested control statements are handled the same way at every level. Renaming then walks the
program once in order: after `Update(new, old)`, a use of `old` (in the same block, or a nested
one) means `new`; block returns and loop inputs are read at the block's end and at N. Update
statements are dropped: the result is in SSA form, with no mutation left.
"""

from __future__ import annotations

from einsat.frontend.program import (
    CONTROL,
    AccessStmt,
    AssignStmt,
    Block,
    IfStmt,
    LoopStmt,
    OpStmt,
    Program,
    UpdateStmt,
    defined,
)


def _defined_inside(stmt) -> set[str]:
    names = set()
    for block in stmt.blocks:
        names.update(block.params)
        for s in block.stmts:
            names.update(defined(s))
            if isinstance(s, CONTROL):
                names.update(_defined_inside(s))
    return names


def _updated_inside(stmt) -> list[str]:
    """The `old` of every Update inside stmt's blocks, in program order, without repeats."""
    olds: list[str] = []
    for block in stmt.blocks:
        for s in block.stmts:
            if isinstance(s, UpdateStmt):
                olds.append(s.old)
            elif isinstance(s, CONTROL):
                olds.extend(_updated_inside(s))
    return list(dict.fromkeys(olds))


def block_propagation(program: Program) -> Program:
    """Add block arguments, returns and outputs for the values updated across control flow."""
    counter = [0]

    def version(x: str) -> str:
        counter[0] += 1
        new = f"{x.split('#')[0]}#p{counter[0]}"
        program.types[new] = program.types[x]
        return new

    def visit(block: Block) -> None:
        stmts = []
        for stmt in block.stmts:
            stmts.append(stmt)
            if not isinstance(stmt, CONTROL):
                continue
            for b in stmt.blocks:
                visit(b)
            inside = _defined_inside(stmt)
            crossing = [x for x in _updated_inside(stmt) if x not in inside]
            for x in crossing:
                x0 = version(x)
                stmt.outputs.append(x0)
                if isinstance(stmt, LoopStmt):
                    xp = version(x)
                    stmt.inits.append(x)
                    stmt.body.params.append(xp)
                    stmt.body.stmts.insert(0, UpdateStmt(xp, x))
                    stmt.body.returns.append(x)
                else:
                    stmt.then.returns.append(x)
                    stmt.other.returns.append(x)
                stmts.append(UpdateStmt(x0, x))
        block.stmts = stmts

    visit(program.body)
    return program


def rename(program: Program) -> Program:
    """Replace every use of a value by its latest version and drop the Update statements."""

    def visit(block: Block, env: dict[str, str]) -> None:
        def r(name: str) -> str:
            return env.get(name, name) if name else name

        stmts = []
        for s in block.stmts:
            if isinstance(s, UpdateStmt):
                env[s.old] = s.new
                continue
            if isinstance(s, LoopStmt):
                s.trip, s.inits = r(s.trip), [r(x) for x in s.inits]
                visit(s.body, dict(env))
            elif isinstance(s, IfStmt):
                s.cond = r(s.cond)
                visit(s.then, dict(env))
                visit(s.other, dict(env))
            else:
                _rename_inputs(s, r)
            stmts.append(s)
        block.stmts = stmts
        block.returns = [r(x) for x in block.returns]

    env: dict[str, str] = {}
    visit(program.body, env)
    program.outputs = [env.get(o, o) for o in program.outputs]
    return program


def _rename_inputs(s, r) -> None:
    if isinstance(s, OpStmt):
        s.inputs = [r(x) for x in s.inputs]
    elif isinstance(s, (AccessStmt, AssignStmt)):
        s.base, s.dyn = r(s.base), [r(x) for x in s.dyn]
        if isinstance(s, AssignStmt):
            s.source = r(s.source)
    else:
        raise TypeError(f"renaming expects a rewritten program, found {type(s).__name__}")
