"""The imperative program's own semantics: real NumPy views and in-place copies.

`run_program` executes a traced (not yet functionalized) program the way the eager function
ran: a View is a NumPy view of its base, a Mutate is `np.copyto` into the target (so every
alias sees it), ops write fresh arrays, loops and branches run in Python. It checks the trace
against the function independently of functionalization, and it records how often each block
ran, which the launch counts (`launches.py`) multiply with.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import numpy as np

from einsat.frontend.program import (
    AccessStmt,
    AssignStmt,
    Block,
    IfStmt,
    LoopStmt,
    MutateStmt,
    OpStmt,
    Program,
    ViewStmt,
)
from einsat.ir.ops.views import apply_spec
from einsat.ir.registry import Op, opdef


def run_program(program: Program, inputs: Mapping[str, np.ndarray]) -> tuple[list[np.ndarray], Counter]:
    """(outputs, runs): the program's outputs and how many times each block ran (by id)."""
    env: dict[str, np.ndarray] = {n: np.array(inputs[n], copy=True) for n in program.inputs}
    env.update({n: np.array(a) for n, a in program.constants.items()})
    runs: Counter = Counter()
    _block(program.body, env, runs)
    return [np.array(env[o], copy=True) for o in program.outputs], runs


def _block(block: Block, env: dict, runs: Counter) -> None:
    runs[id(block)] += 1
    for s in block.stmts:
        if isinstance(s, OpStmt):
            outs = opdef(s.op).numpy([env[i] for i in s.inputs], s.attrs)
            env.update((o, np.array(v, copy=True)) for o, v in zip(s.outputs, outs))
        elif isinstance(s, ViewStmt):
            env[s.out] = apply_spec(env[s.base], s.spec, [env[d] for d in s.dyn])
        elif isinstance(s, MutateStmt):
            np.copyto(env[s.target], env[s.source])
        elif isinstance(s, (AccessStmt, AssignStmt)):  # a functionalized program's statements
            op = Op.ACCESS if isinstance(s, AccessStmt) else Op.ASSIGN
            env[s.out] = opdef(op).numpy([env[i] for i in s.inputs], {"spec": s.spec})[0]
        elif isinstance(s, LoopStmt):
            carried = [np.array(env[x], copy=True) for x in s.inits]
            for i in range(int(env[s.trip])):
                env.update(zip(s.body.params, [np.asarray(i, np.int64), *carried]))
                _block(s.body, env, runs)
                carried = [np.array(env[r], copy=True) for r in s.body.returns]
            env.update(zip(s.outputs, carried))
        elif isinstance(s, IfStmt):
            block = s.then if bool(env[s.cond]) else s.other
            _block(block, env, runs)
            env.update((o, np.array(env[r], copy=True)) for o, r in zip(s.outputs, block.returns))
        else:
            raise TypeError(f"cannot run a {type(s).__name__} (an annotation of the rewrite)")
