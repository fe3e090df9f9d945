"""The two programs of the TensorSSA paper (DAC'24), written in NumPy.

Figure 2: inside both branches of an `if` on a tensor value, `a` is updated as a whole and `b`
partially, through a view; TorchScript's SSA returns only `a` from the branches, TensorSSA
returns both. Figure 4: a loop on a tensor trip count updates row `i` of `b` through a view
each iteration; block propagation makes `b` a loop-carried value.
"""

from __future__ import annotations

import numpy as np

from einsat.frontend import cond, loop


def figure2(a, b, idx):
    """if idx >= 0: a += 1; b[idx] = a[idx]   else: a -= 1; b[:, idx] = a[:, idx]"""
    def then():
        np.add(a, 1, out=a)
        b[idx] = a[idx]

    def other():
        np.subtract(a, 1, out=a)
        b[:, idx] = a[:, idx]

    cond(idx >= 0, then, other)
    return a, b


def figure4(b, n):
    """b = b.clone(); for i in range(n): b[i] = b[i] + 1"""
    b = b.copy()

    def body(i):
        b[i] = b[i] + 1

    loop(n, body)
    return b


def figure2_inputs(rng):
    return (rng.standard_normal((4, 4)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32),
            np.array(-2, np.int64))


def figure4_inputs(rng):
    return rng.standard_normal((6, 5)).astype(np.float32), np.array(4, np.int64)
