"""Alias analysis of view chains (TensorSSA §2.3, §4.1).

Every `View` statement adds a points-to edge `v -> base` (a memory dependency). Views have one
base each, so the alias graph is a forest and every alias is a *must* alias: the root of a tree
is the tensor owning the storage, `T.t`; its nodes are `T.V`, the views of it; the mutations of
any of them are `T.M`. A value's *view path* is the chain of edges from it up to its root.

Control-flow dependencies (a view passed through a loop carry or returned from a branch) are
not followed: such values are copies in the program (block results are fresh values), so their
in-place update is refused where NumPy would alias them (see `check_mutable`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from einsat.errors import FrontendError
from einsat.frontend.program import CONTROL, MutateStmt, Program, ViewStmt


@dataclass
class AliasTree:
    """T = (t, V, M): the storage owner, its views (program order), the mutations of any alias."""

    t: str
    views: list[str] = field(default_factory=list)
    mutations: list[MutateStmt] = field(default_factory=list)


@dataclass
class AliasGraph:
    edge: dict[str, ViewStmt]                # view -> its View statement (the edge to its base)
    children: dict[str, list[ViewStmt]]      # base -> the View statements of its direct views
    root: dict[str, str]                     # every value -> the root of its tree
    trees: dict[str, AliasTree]              # root -> its tree (roots with views or mutations)

    def path(self, v: str) -> list[ViewStmt]:
        """The view path from v up to its root: [v <- x, x <- ..., ... <- t]."""
        edges = []
        while v in self.edge:
            edges.append(self.edge[v])
            v = self.edge[v].base
        return edges


def analyze(program: Program) -> AliasGraph:
    edge: dict[str, ViewStmt] = {}
    children: dict[str, list[ViewStmt]] = {}
    root: dict[str, str] = {}
    trees: dict[str, AliasTree] = {}
    for stmt, _ in program.walk():
        if isinstance(stmt, ViewStmt):
            edge[stmt.out] = stmt
            children.setdefault(stmt.base, []).append(stmt)
            r = root[stmt.out] = root.get(stmt.base, stmt.base)
            trees.setdefault(r, AliasTree(r)).views.append(stmt.out)
        elif isinstance(stmt, MutateStmt):
            r = root.get(stmt.target, stmt.target)
            trees.setdefault(r, AliasTree(r)).mutations.append(stmt)
    graph = AliasGraph(edge, children, root, trees)
    check_mutable(program, graph)
    return graph


def check_mutable(program: Program, graph: AliasGraph) -> None:
    """Refuse in-place updates that functionalization cannot express faithfully."""
    params = set()
    for stmt, _ in program.walk():
        if isinstance(stmt, CONTROL):
            for block in stmt.blocks:
                params.update(block.params)
    for t, tree in graph.trees.items():
        for m in tree.mutations:
            if t in params:
                raise FrontendError(
                    f"{m.line}: the loop body updates its loop-carried value (or index) {t} in place; "
                    "carried values are passed by value: return a new value, or update an outer "
                    "array in place instead (it is carried automatically)")
            if t in program.aliased:
                raise FrontendError(
                    f"{m.line}: {t} came out of a loop or cond that returned an outer array (or a "
                    "view of one) unchanged; NumPy would update that outer array too. Return a copy")
            if t in program.constants:
                raise FrontendError(f"{m.line}: a constant is updated in place")
