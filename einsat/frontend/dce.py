"""Dead-code elimination on a functionalized program (TensorSSA §4.1.3, last step).

After renaming every statement is pure, so a statement none of whose outputs is used is dead.
Loops are pruned slot by slot: a carried slot is live when its output is used after the loop,
or when the body needs its parameter to compute another live slot (a fixpoint); an If keeps the
outputs used after it. A control statement with no live output goes entirely.
"""

from __future__ import annotations

from einsat.frontend.program import CONTROL, Block, IfStmt, LoopStmt, Program, defined


def _uses(stmt) -> list[str]:
    if isinstance(stmt, LoopStmt):
        return [stmt.trip, *stmt.inits]
    if isinstance(stmt, IfStmt):
        return [stmt.cond]
    return [x for x in stmt.inputs if x]


def _live_in(block: Block, live: set[str]) -> set[str]:
    """The names a block reads, given the names needed after its statements (no pruning)."""
    live = set(live) | set(block.returns)
    for s in reversed(block.stmts):
        if any(o in live for o in defined(s)):
            live.update(_uses(s))
            for b in getattr(s, "blocks", ()):
                live |= _live_in(b, set())
    return live


def _prune_loop(s: LoopStmt, live: set[str]) -> bool:
    k = len(s.inits)
    needed = {j for j in range(k) if s.outputs[j] in live}
    while True:
        used = _live_in(Block(stmts=s.body.stmts, returns=[s.body.returns[j] for j in needed]), set())
        more = needed | {j for j in range(k) if s.body.params[1 + j] in used}
        if more == needed:
            break
        needed = more
    keep = sorted(needed)
    s.inits = [s.inits[j] for j in keep]
    s.outputs = [s.outputs[j] for j in keep]
    s.body.returns = [s.body.returns[j] for j in keep]
    s.body.params = [s.body.params[0]] + [s.body.params[1 + j] for j in keep]
    return bool(keep)


def _prune_if(s: IfStmt, live: set[str]) -> bool:
    keep = [j for j, o in enumerate(s.outputs) if o in live]
    s.outputs = [s.outputs[j] for j in keep]
    for b in s.blocks:
        b.returns = [b.returns[j] for j in keep]
    return bool(keep)


def _sweep(block: Block, live: set[str]) -> None:
    live.update(block.returns)
    kept = []
    for s in reversed(block.stmts):
        if isinstance(s, LoopStmt):
            alive = _prune_loop(s, live)
        elif isinstance(s, IfStmt):
            alive = _prune_if(s, live)
        else:
            alive = any(o in live for o in defined(s))
        if not alive:
            continue
        live.update(_uses(s))
        if isinstance(s, CONTROL):
            for b in s.blocks:
                _sweep(b, live)
        kept.append(s)
    block.stmts = kept[::-1]


def eliminate_dead_code(program: Program) -> Program:
    """Remove dead statements and loop/if slots in place; returns the program."""
    _sweep(program.body, set(program.outputs))
    return program
