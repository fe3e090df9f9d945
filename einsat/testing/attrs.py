"""`attrs_for(op, types)`: a hypothesis strategy of valid attributes for an op and its input types.

Every strategy here draws only attributes the registry accepts for those inputs (shape inference
succeeds), and shrinks towards the op's defaults: stride 1, no padding, the first axis, ...
"""

from __future__ import annotations

from math import prod

from hypothesis import strategies as st

from einsat.ir.registry import Op
from einsat.ir.types import TensorType


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@st.composite
def _window(draw, spatial, kernel, pool: bool):
    """stride, padding (begins, ends), dilation for windows of `kernel` over `spatial`."""
    stride, dilation, begins, ends = [], [], [], []
    for n, k in zip(spatial, kernel):
        d = 1 if pool else draw(st.integers(1, 2))
        span = d * (k - 1) + 1
        limit = k - 1 if pool else 2
        b = draw(st.integers(0, limit))
        e = draw(st.integers(0, limit))
        if n + b + e < span:
            b, e = 0, 0
            if n < span:
                d, span = 1, k
        stride.append(draw(st.integers(1, 2)))
        dilation.append(d)
        begins.append(b)
        ends.append(e)
    out = {"stride": tuple(stride), "padding": tuple(begins + ends)}
    if not pool:
        out["dilation"] = tuple(dilation)
    return out


@st.composite
def _reshape_target(draw, shape):
    """Merge two neighbouring dims, or split one dim in two, or both."""
    dims = list(shape)
    if len(dims) >= 2 and draw(st.booleans()):
        i = draw(st.integers(0, len(dims) - 2))
        dims[i:i + 2] = [dims[i] * dims[i + 1]]
    if dims and draw(st.booleans()):
        i = draw(st.integers(0, len(dims) - 1))
        a = draw(st.sampled_from(_divisors(dims[i])))
        dims[i:i + 1] = [a, dims[i] // a]
    return tuple(dims)


@st.composite
def _slice(draw, shape):
    starts, ends, steps = [], [], []
    for n in shape:
        step = draw(st.sampled_from([1, 2, -1])) if n > 1 else 1
        a = draw(st.integers(0, max(n - 1, 0)))
        b = draw(st.integers(a + 1, n)) if n else 0
        if step > 0:
            starts.append(a)
            ends.append(b)
        else:
            starts.append(b - 1)
            ends.append(a - 1 if a > 0 else -(n + 1))
        steps.append(step)
    return {"starts": tuple(starts), "ends": tuple(ends), "steps": tuple(steps)}


@st.composite
def _pad(draw, shape, modes):
    mode = draw(st.sampled_from(modes))
    limit = [min(2, n - 1) if mode == "reflect" else (2 if n else 0) for n in shape]
    pads = tuple(draw(st.integers(0, max(m, 0))) for m in limit)
    pads += tuple(draw(st.integers(0, max(m, 0))) for m in limit)
    out = {"pads": pads, "mode": mode}
    if mode == "constant" and draw(st.booleans()) and "value" in modes:
        out["value"] = draw(st.sampled_from([1.0, -0.5]))
    return out


@st.composite
def _split(draw, shape):
    axes = [d for d, n in enumerate(shape) if n >= 2]
    axis = draw(st.sampled_from(axes))
    cut = draw(st.integers(1, shape[axis] - 1))
    return {"axis": axis, "sizes": (cut, shape[axis] - cut)}


@st.composite
def _axes(draw, rank):
    axes = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    return tuple(sorted(axes))


def attrs_for(op: Op, types: list[TensorType], *, pad_modes=("constant", "reflect", "edge")) -> st.SearchStrategy:
    """Valid attributes of `op` for inputs of `types` (a strategy of dicts). Ops whose attributes
    depend on more than the first input's type take the rest from `types` (conv: the weight)."""
    x = types[0]
    shape, rank = x.shape, x.rank
    if op in (Op.CONV, Op.CONV_TRANSPOSE):
        kernel = types[1].shape[2:]
        return _window(shape[2:], kernel, pool=False)
    if op in (Op.AVGPOOL, Op.MAXPOOL):
        @st.composite
        def pool(draw):
            kernel = tuple(draw(st.integers(1, min(3, n))) for n in shape[2:])
            a = draw(_window(shape[2:], kernel, pool=True))
            a["kernel"] = kernel
            a["ceil_mode"] = int(draw(st.booleans()))
            if op is Op.AVGPOOL:
                a["count_include_pad"] = int(draw(st.booleans()))
            return a
        return pool()
    if op is Op.TRANSPOSE:
        return st.permutations(range(rank)).map(lambda p: {"perm": tuple(p)})
    if op is Op.RESHAPE:
        return _reshape_target(shape).map(lambda s: {"shape": s})
    if op is Op.FLATTEN:
        return st.integers(0, rank).map(lambda a: {"axis": a})
    if op is Op.UNSQUEEZE:
        return st.integers(0, rank).map(lambda a: {"axes": (a,)})
    if op is Op.SQUEEZE:
        ones = [d for d, n in enumerate(shape) if n == 1]
        return st.just({"axes": tuple(ones)})
    if op is Op.EXPAND:
        return st.integers(2, 3).map(lambda k: {"shape": tuple(k if n == 1 else n for n in shape)})
    if op in (Op.CONCAT, Op.SOFTMAX):
        return st.integers(0, rank - 1).map(lambda a: {"axis": a})
    if op is Op.SPLIT:
        return _split(shape)
    if op is Op.SLICE:
        return _slice(shape)
    if op is Op.PAD:
        return _pad(shape, pad_modes)
    if op in (Op.REDUCE_SUM, Op.REDUCE_MEAN):
        return st.tuples(_axes(rank), st.integers(0, 1)).map(lambda t: {"axes": t[0], "keepdims": t[1]})
    if op is Op.GATHER:
        return st.integers(0, rank - 1).map(lambda a: {"axis": a})
    if op is Op.GELU:
        return st.sampled_from(["none", "tanh"]).map(lambda a: {"approximate": a})
    if op is Op.LEAKY_RELU:
        return st.sampled_from([0.01, 0.2]).map(lambda a: {"alpha": a})
    if op is Op.GEMM:
        return st.fixed_dictionaries({"trans_a": st.integers(0, 1), "trans_b": st.integers(0, 1),
                                      "alpha": st.sampled_from([1.0, 0.5]), "beta": st.sampled_from([1.0, 2.0])})
    if op in (Op.LAYERNORM, Op.RMSNORM):
        return st.integers(0, rank - 1).map(lambda a: {"axis": a})
    return st.just({})


def size_ok(shape, limit: int) -> bool:
    return prod(shape) <= limit
