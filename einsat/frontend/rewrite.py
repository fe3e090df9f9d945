"""RewriteMutation (TensorSSA Algorithm 1, lines 1-16): views become Access, mutations become
Assign chains up to the storage owner (pass-up) and Access chains down to every live view
(pass-down), each new version announced by an Update.

For `Mutate(v, w)` with view path `v <- x[s_v], x <- ... <- t`:

    pass-up:    v' = Assign(v, w, [])            (w broadcast into v's shape: the new data)
                x' = Assign(x, v', s_v)          ... up to t' = Assign(t, ..., s_x)
    pass-down:  Update(t', t); for each view u <- y[s] of t visible at the mutation (its View
                statement dominates it), u' = Access(y', s) and Update(u', u), recursively.

Names in the inserted statements are the *original* ones (`v`, `x`, the dynamic indices): the
renaming pass later reads each as its latest version at that point. The Mutate is removed.
"""

from __future__ import annotations

from einsat.frontend.alias import AliasGraph
from einsat.frontend.program import (
    AccessStmt,
    AssignStmt,
    Block,
    MutateStmt,
    Program,
    UpdateStmt,
    ViewStmt,
)


class _Rewriter:
    def __init__(self, program: Program, alias: AliasGraph):
        self.program = program
        self.alias = alias
        self.counter = 0

    def version(self, name: str) -> str:
        """A new version name of `name` (`x` -> `x#3`), typed like it."""
        self.counter += 1
        new = f"{name.split('#')[0]}#{self.counter}"
        self.program.types[new] = self.program.types[name]
        return new

    def block(self, block: Block, visible: set[str]) -> None:
        visible = set(visible)  # views defined in this block are visible only inside it
        stmts = []
        for stmt in block.stmts:
            if isinstance(stmt, ViewStmt):
                visible.add(stmt.out)
                stmts.append(AccessStmt(stmt.out, stmt.base, stmt.spec, list(stmt.dyn), stmt.line))
            elif isinstance(stmt, MutateStmt):
                stmts.extend(self.mutation(stmt, visible))
            else:
                for b in getattr(stmt, "blocks", ()):
                    self.block(b, visible)
                stmts.append(stmt)
        block.stmts = stmts

    def mutation(self, m: MutateStmt, visible: set[str]) -> list:
        out = []
        # pass up: from the mutated view to the storage owner
        v, v_new = m.target, self.version(m.target)
        out.append(AssignStmt(v_new, v, m.source, (), [], m.line))
        for edge in self.alias.path(m.target):
            x_new = self.version(edge.base)
            out.append(AssignStmt(x_new, edge.base, v_new, edge.spec, list(edge.dyn), m.line))
            v, v_new = edge.base, x_new
        # pass down: from the storage owner to every view visible here
        self.traverse(v, v_new, visible, out, m.line)
        return out

    def traverse(self, x: str, x_new: str, visible: set[str], out: list, line: str) -> None:
        out.append(UpdateStmt(x_new, x))
        for view in self.alias.children.get(x, ()):
            if view.out in visible:
                v_new = self.version(view.out)
                out.append(AccessStmt(v_new, x_new, view.spec, list(view.dyn), line))
                self.traverse(view.out, v_new, visible, out, line)


def rewrite_mutations(program: Program, alias: AliasGraph) -> Program:
    """Rewrite `program` in place (and return it): no View or Mutate statement remains."""
    _Rewriter(program, alias).block(program.body, set())
    return program

