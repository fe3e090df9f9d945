"""BlockPropagation, renaming and dead-code elimination (Algorithm 1, lines 17-35)."""

import numpy as np

from benchmarks.imperative.paper import figure2, figure4
from einsat.frontend import trace
from einsat.frontend.alias import analyze
from einsat.frontend.dce import eliminate_dead_code
from einsat.frontend.program import IfStmt, LoopStmt, UpdateStmt
from einsat.frontend.propagate import block_propagation, rename
from einsat.frontend.rewrite import rewrite_mutations

B = np.zeros((4, 3), np.float32)


def rewritten(fn, *args):
    p = trace(fn, args)
    return rewrite_mutations(p, analyze(p))


def test_a_loop_gets_a_block_argument_return_and_output():
    p = rewritten(figure4, B, np.array(2, np.int64))
    copy, loop = p.body.stmts
    assert loop.inits == [] and loop.outputs == []
    block_propagation(p)
    b = copy.outputs[0]
    assert loop.inits == [b] and len(loop.body.params) == 2 and loop.body.returns == [b]
    first = loop.body.stmts[0]
    assert isinstance(first, UpdateStmt) and first.old == b and first.new == loop.body.params[1]
    after = p.body.stmts[2]
    assert isinstance(after, UpdateStmt) and after.old == b and after.new == loop.outputs[0]


def test_renaming_reads_the_latest_versions():
    p = rewritten(figure4, B, np.array(2, np.int64))
    block_propagation(p)
    rename(p)
    assert not any(isinstance(s, UpdateStmt) for s, _ in p.walk())
    loop = p.body.stmts[1]
    assert p.outputs == [loop.outputs[0]]                  # the result is the loop's output
    param = loop.body.params[1]
    first_access = loop.body.stmts[0]
    assert first_access.base == param                      # each iteration reads the last one's b
    assert loop.body.returns[0] == loop.body.stmts[4].out  # and returns the version it assigned


def test_branches_return_both_updated_values_and_the_sibling_returns_the_outer_one():
    def only_then(a, b, p):
        def then():
            b[0] = a[0]
        from einsat.frontend import cond
        cond(p, then, lambda: None)
        return b

    p = rewritten(only_then, B, B, np.array(True))
    block_propagation(p)
    rename(p)
    (branch,) = [s for s in p.body.stmts if isinstance(s, IfStmt)]
    assert branch.other.returns == ["b"]                    # unchanged in the else branch
    assert branch.then.returns != ["b"]
    assert p.outputs == branch.outputs

    p = rewritten(figure2, B[:3], B[:3], np.array(1))
    block_propagation(p)
    (branch,) = [s for s in p.body.stmts if isinstance(s, IfStmt)]
    assert branch.then.returns == branch.other.returns == ["a", "b"]


def test_dead_code_and_dead_loop_slots_go():
    p = rewritten(figure4, B, np.array(2, np.int64))
    block_propagation(p)
    rename(p)
    n_before = len(p.body.stmts[1].body.stmts)
    eliminate_dead_code(p)
    loop = p.body.stmts[-1]
    assert isinstance(loop, LoopStmt) and len(loop.body.stmts) < n_before
    p.outputs = []                                          # nothing is needed: everything goes
    eliminate_dead_code(p)
    assert p.body.stmts == []
