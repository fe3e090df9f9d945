"""Alias analysis and RewriteMutation (pass-up, pass-down) on small traced programs."""

import numpy as np

from benchmarks.imperative.paper import figure4
from einsat.frontend import trace
from einsat.frontend.alias import analyze
from einsat.frontend.program import AccessStmt, AssignStmt, MutateStmt, UpdateStmt, ViewStmt
from einsat.frontend.rewrite import rewrite_mutations

X = np.zeros((4, 6), np.float32)


def nested(x):
    y = x.copy()
    a = y[1:]          # a <- y
    b = a[:, ::2]      # b <- a
    c = y[0]           # c <- y, a sibling of a
    later = None
    b[0] = 7           # the mutation N
    later = y[2]       # made after N: not updated by N's pass-down
    return y, a, b, c, later


def test_alias_forest_and_view_paths():
    p = trace(nested, (X,))
    alias = analyze(p)
    (tree,) = alias.trees.values()
    y = tree.t
    assert len(tree.views) == 5 and len(tree.mutations) == 1   # a, b, c, the b[0] view, later
    target = tree.mutations[0].target
    path = [e.base for e in alias.path(target)]
    assert path[-1] == y and len(path) == 3                     # b[0] <- b <- a <- y
    assert all(alias.root[v] == y for v in tree.views)


def test_pass_up_assigns_every_level_and_pass_down_reaches_visible_views():
    p = trace(nested, (X,))
    alias = analyze(p)
    (tree,) = alias.trees.values()
    mutation = tree.mutations[0]
    rewrite_mutations(p, alias)
    stmts = p.body.stmts
    assert not any(isinstance(s, (ViewStmt, MutateStmt)) for s in stmts)
    k = next(i for i, s in enumerate(stmts) if isinstance(s, AssignStmt))
    up = stmts[k:k + 4]
    # v' = Assign(v, w, []), then one Assign per edge of the view path up to y
    assert [type(s) for s in up] == [AssignStmt] * 4
    assert up[0].spec == () and up[0].base == mutation.target and up[0].source == mutation.source
    assert [s.source for s in up[1:]] == [s.out for s in up[:-1]]
    assert up[-1].base == tree.t
    down = stmts[k + 4:]
    updates = [s for s in down if isinstance(s, UpdateStmt)]
    assert updates[0].old == tree.t and updates[0].new == up[-1].out
    updated = {u.old for u in updates}
    # y, a, b, c and the b[0] view were visible at N; `later` was made after it
    assert len(updated) == 5 and tree.views[-1] not in updated
    accesses = [s for s in down if isinstance(s, AccessStmt) and s.line == mutation.line]
    assert len(accesses) == 4                                   # one per updated view


def test_figure4_rewrite_inside_the_loop_body():
    p = trace(figure4, (X, np.array(2, np.int64)))
    rewrite_mutations(p, analyze(p))
    (_, loop) = p.body.stmts
    kinds = [type(s).__name__ for s in loop.body.stmts]
    # Fig. 4(c): the views become accesses, the copy_ an assign chain, then updates and accesses
    assert kinds[:3] == ["AccessStmt", "OpStmt", "AccessStmt"]
    assert kinds[3:5] == ["AssignStmt", "AssignStmt"]
    assert "UpdateStmt" in kinds and "MutateStmt" not in kinds
