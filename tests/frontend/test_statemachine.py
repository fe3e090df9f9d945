"""Random chains of views and in-place updates: functionalized programs against NumPy's views.

A state machine grows a program step by step: take a view of any array made so far (basic
indexing with steps, negative bounds, `None`, `...` and a traced integer index (a program input
holding -1), transposes, reshapes that NumPy may or may
not make views, squeeze / expand_dims / flip, broadcasts), update any writeable one in place
(`x[key] = c`, `+=`, `*=`, `np.maximum(v, c, out=v)`, `np.copyto` from another array, boolean
masks), or compute a fresh array. After every step the whole program is functionalized and must
return exactly what NumPy returns for *every* array it made: the bases and all their views.
"""

from __future__ import annotations

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tests.frontend.oracle import check

DYN = "i"  # in a key: the program's index input


def apply(step, env: list, i) -> None:
    """Run one step on `env` (NumPy arrays or traced ones alike); `i` is the index input."""
    kind, k, arg = step
    x = env[k]
    if kind in ("index", "set"):
        key = arg if kind == "index" else arg[0]
        key = tuple(i if isinstance(item, str) else item for item in key)
        arg = key if kind == "index" else (key, arg[1])
    if kind == "index":
        env.append(x[arg])
    elif kind == "transpose":
        env.append(x.transpose(arg))
    elif kind == "reshape":
        env.append(x.reshape(arg))
    elif kind == "expand_dims":
        env.append(np.expand_dims(x, arg))
    elif kind == "squeeze":
        env.append(np.squeeze(x))
    elif kind == "flip":
        env.append(np.flip(x, arg))
    elif kind == "broadcast":
        env.append(np.broadcast_to(x, arg))
    elif kind == "compute":
        env.append(x * 2 - 1)
    elif kind == "set":
        key, value = arg
        x[key] = value
    elif kind == "iadd":
        x += arg
    elif kind == "imul":
        x *= arg
    elif kind == "maximum":
        np.maximum(x, arg, out=x)
    elif kind == "copyto":
        np.copyto(x, env[arg])
    elif kind == "mask":
        x[x > arg] = -arg
    else:
        raise AssertionError(kind)


def key_for(draw, shape):
    """A basic index for `shape`: ints, slices (any step sign), None and Ellipsis."""
    key = []
    for d in shape:
        kind = draw(st.sampled_from(["all", "int", "slice", "dyn"] if d else ["all", "slice"]))
        if kind == "int":
            key.append(draw(st.integers(-d, d - 1)))
        elif kind == "dyn":
            key.append(DYN)
        elif kind == "slice":
            bound = st.none() | st.integers(-d - 1, d + 1)
            key.append(slice(draw(bound), draw(bound), draw(st.sampled_from([None, 1, 2, 3, -1, -2]))))
        else:
            key.append(slice(None))
        if draw(st.integers(0, 5)) == 0:
            key.append(None)
    if key and draw(st.booleans()):  # drop trailing axes, or write them as `...`
        cut = draw(st.integers(0, len(key)))
        key = key[:cut] + ([Ellipsis] if draw(st.booleans()) else [])
    return tuple(key)


def reshape_for(draw, shape):
    size = int(np.prod(shape))
    dims = []
    rest = size
    while rest > 1 and len(dims) < 3:
        d = draw(st.sampled_from([q for q in range(1, rest + 1) if rest % q == 0]))
        dims.append(d)
        rest //= d
    dims.append(rest)
    if size and draw(st.booleans()):
        dims[draw(st.integers(0, len(dims) - 1))] = -1
    return tuple(dims)


class ViewsAndUpdates(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.steps: list = []
        self.env: list[np.ndarray] = []

    @initialize(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple))
    def start(self, shape):
        self.x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape) - 3
        self.i = np.array(-1, np.int64)
        self.env = [self.x.copy()]

    def _do(self, step):
        apply(step, self.env, self.i)
        self.steps.append(step)

    def _pick(self, data, writeable: bool = False) -> int | None:
        ks = [k for k, a in enumerate(self.env) if a.flags.writeable or not writeable]
        return data.draw(st.sampled_from(ks)) if ks else None

    @rule(data=st.data())
    def view(self, data):
        k = self._pick(data)
        x = self.env[k]
        kind = data.draw(st.sampled_from(["index", "index", "transpose", "reshape", "expand_dims",
                                          "squeeze", "flip", "broadcast"]))
        if kind == "index":
            arg = key_for(data.draw, x.shape)
        elif kind == "transpose":
            arg = tuple(data.draw(st.permutations(range(x.ndim))))
        elif kind == "reshape":
            arg = reshape_for(data.draw, x.shape)
        elif kind == "expand_dims":
            arg = data.draw(st.integers(-x.ndim - 1, x.ndim))
        elif kind == "flip":
            if not x.ndim:
                return
            arg = data.draw(st.integers(-x.ndim, x.ndim - 1))
        elif kind == "broadcast":
            arg = (data.draw(st.integers(1, 3)),) + x.shape
        else:
            arg = None
        self._do((kind, k, arg))

    @rule(data=st.data())
    def update(self, data):
        k = self._pick(data, writeable=True)
        if k is None:
            return
        x = self.env[k]
        kind = data.draw(st.sampled_from(["set", "iadd", "imul", "maximum", "copyto", "mask"]))
        if kind == "set":
            arg = (key_for(data.draw, x.shape), float(data.draw(st.integers(-9, 9))))
        elif kind == "copyto":
            sources = [j for j, a in enumerate(self.env) if _broadcasts(a.shape, x.shape)]
            arg = data.draw(st.sampled_from(sources))
        else:
            arg = float(data.draw(st.integers(-3, 3)))
        self._do((kind, k, arg))

    @rule(data=st.data())
    def at_index(self, data):
        """x[i] through the traced index: a view when i is a Python int in NumPy's run (a loop
        index), a copy when it is a 0-d array (here: NumPy's advanced indexing); written either way."""
        k = self._pick(data)
        x = self.env[k]
        if not x.ndim or not x.flags.writeable:
            return
        if data.draw(st.booleans()):
            self._do(("index", k, (DYN,)))
        else:
            self._do(("set", k, ((DYN,), float(data.draw(st.integers(-9, 9))))))

    @rule(data=st.data())
    def compute(self, data):
        self._do(("compute", self._pick(data), None))

    @invariant()
    def functionalized_program_sees_what_numpy_sees(self):
        if not self.env:
            return
        steps = list(self.steps)

        def program(x, i):
            env = [x.copy()]
            for step in steps:
                apply(step, env, i)
            return tuple(env)

        check(program, self.x, self.i)


def _broadcasts(src, dst) -> bool:
    try:
        return np.broadcast_shapes(src, dst) == tuple(dst)
    except ValueError:
        return False


ViewsAndUpdates.TestCase.settings = settings(stateful_step_count=12)
test_views_and_updates = ViewsAndUpdates.TestCase
