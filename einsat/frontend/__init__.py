"""TensorSSA: imperative NumPy functions (views, in-place updates, control flow) as pure programs.

    import einsat
    from einsat.frontend import loop, cond

    g = einsat.functionalize(fn, example_inputs)   # an ir.Graph with access / assign / loop / if_

`loop` and `cond` keep control flow on tensor values structured; everything else (views,
`x[i] = y`, `v *= 2`, `np.copyto`, `out=`) is plain NumPy. See `functionalize.py` for the
pipeline and docs/frontend.md for where it sits.
"""

from einsat.frontend.control import cond, loop
from einsat.frontend.functionalize import functionalize, functionalize_program, trace

__all__ = ["cond", "functionalize", "functionalize_program", "loop", "trace"]
