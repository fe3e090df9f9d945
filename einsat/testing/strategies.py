"""Hypothesis strategies for op shapes and attributes (small sizes: meant for exhaustive checks).

Each `*_cases` strategy draws a dict with the input shapes and the einsat attributes of one op
application that is valid by construction, e.g. `conv_cases()` ->
`{"x": (N, C, *sp), "w": (F, C/g, *k), "bias": bool, "attrs": {...}}`. Arrays are left to the
caller (draw a seed and use `arrays(seed, shape)`), which keeps shrinking fast.

Whole programs and mutant pairs (from `einsat.testing.programs` and `einsat.testing.mutants`):

  programs(ops, max_nodes, ...)   random well-typed programs over the registry; a program is a
                                  list of steps (op, operand, attributes, weights), so failures
                                  shrink to fewer steps, earlier ops, default attributes
  multilinear_programs(...)       programs of PET's multi-linear (and affine) ops only
  attrs_for(op, types)            valid attributes of one op for its input types
  input_arrays(graph)             a strategy of input dicts for a program
  program_inputs(graph, seed)     seeded standard-normal inputs (a plain function)
  mutant_pairs(families)          `MutantPair(original, mutant, regions, family)`: a multi-linear
                                  program, a mutant of it and the exact output regions where
                                  they differ (none for the sound families)
  ELEMENTWISE, MULTILINEAR, ALL_OPS  the op lists programs draw from (first = preferred)
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from einsat.testing.attrs import attrs_for  # noqa: F401  (re-exported)
from einsat.testing.mutants import MutantPair, mutant_pairs  # noqa: F401
from einsat.testing.programs import (  # noqa: F401  (re-exported)
    ALL_OPS,
    ELEMENTWISE,
    MULTILINEAR,
    input_arrays,
    multilinear_programs,
    program_inputs,
    programs,
)


def arrays(seed: int, *shapes, dtype=np.float32) -> list[np.ndarray]:
    """Standard-normal arrays of the given shapes, from one seed."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


seeds = st.integers(0, 2**32 - 1)


def shapes(min_rank: int = 0, max_rank: int = 4, min_side: int = 1, max_side: int = 4):
    return st.lists(st.integers(min_side, max_side), min_size=min_rank, max_size=max_rank).map(tuple)


@st.composite
def axes(draw, rank: int, min_size: int = 0, negative: bool = True) -> tuple[int, ...]:
    """Distinct axes of a rank-`rank` tensor, in any order, some written negatively."""
    chosen = draw(st.lists(st.integers(0, max(rank - 1, 0)), min_size=min_size, max_size=rank, unique=True)) \
        if rank else []
    if negative:
        chosen = [a - rank if draw(st.booleans()) else a for a in chosen]
    return tuple(chosen)


@st.composite
def broadcastable(draw, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to `shape` (a suffix of it, some dims set to 1)."""
    k = draw(st.integers(0, len(shape)))
    return tuple(1 if draw(st.booleans()) else d for d in shape[len(shape) - k:])


@st.composite
def _window(draw, nsp: int, max_kernel: int = 3, dilation: bool = True, pad_below_kernel: bool = False):
    kernel = tuple(draw(st.integers(1, max_kernel)) for _ in range(nsp))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(nsp))
    dil = tuple(draw(st.integers(1, 2)) if dilation else 1 for _ in range(nsp))
    top = [k - 1 if pad_below_kernel else 2 for k in kernel]
    padding = tuple(draw(st.integers(0, top[i % nsp])) for i in range(2 * nsp))
    span = tuple(d * (k - 1) + 1 for d, k in zip(dil, kernel))
    # an input at least as large as the window once padded
    sp = tuple(max(draw(st.integers(1, 7)), span[i] - padding[i] - padding[nsp + i]) for i in range(nsp))
    return kernel, stride, dil, padding, sp


@st.composite
def conv_cases(draw, min_nsp: int = 1, max_nsp: int = 2):
    """Strided, dilated, padded, grouped convolutions with 1..2 spatial dims."""
    nsp = draw(st.integers(min_nsp, max_nsp))
    kernel, stride, dil, padding, sp = draw(_window(nsp))
    groups = draw(st.integers(1, 3))
    cg, fg, n = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 2))
    attrs = {"stride": stride, "padding": padding, "dilation": dil, "groups": groups}
    return {"x": (n, cg * groups) + sp, "w": (fg * groups, cg) + kernel, "bias": draw(st.booleans()),
            "attrs": attrs}


@st.composite
def conv_transpose_cases(draw, min_nsp: int = 1, max_nsp: int = 2):
    """Transposed convolutions with strides, dilations, groups, pads and output_padding."""
    nsp = draw(st.integers(min_nsp, max_nsp))
    kernel = tuple(draw(st.integers(1, 3)) for _ in range(nsp))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(nsp))
    dil = tuple(draw(st.integers(1, 2)) for _ in range(nsp))
    out_pad = tuple(draw(st.integers(0, s - 1)) for s in stride)
    sp = tuple(draw(st.integers(1, 5)) for _ in range(nsp))
    full = [s * (i - 1) + o + d * (k - 1) + 1 for s, i, o, d, k in zip(stride, sp, out_pad, dil, kernel)]
    padding = [0] * (2 * nsp)
    for i in range(nsp):  # leave at least one output element
        padding[i] = draw(st.integers(0, min(2, full[i] - 1)))
        padding[nsp + i] = draw(st.integers(0, min(2, full[i] - 1 - padding[i])))
    groups = draw(st.integers(1, 3))
    cg, fg, n = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 2))
    attrs = {"stride": stride, "padding": tuple(padding), "dilation": dil, "groups": groups,
             "output_padding": out_pad}
    return {"x": (n, cg * groups) + sp, "w": (cg * groups, fg) + kernel, "bias": draw(st.booleans()),
            "attrs": attrs}


@st.composite
def pool_cases(draw, kind: str = "max", max_nsp: int = 2):
    """avgpool ("avg") or maxpool ("max") windows with padding (< kernel, as onnxruntime
    requires) and ceil_mode; maxpool windows are also dilated."""
    nsp = draw(st.integers(1, max_nsp))
    kernel, stride, dil, padding, sp = draw(_window(nsp, dilation=kind == "max", pad_below_kernel=True))
    attrs = {"kernel": kernel, "stride": stride, "padding": padding, "ceil_mode": draw(st.integers(0, 1))}
    if kind == "max":
        attrs["dilation"] = dil
    else:
        attrs["count_include_pad"] = draw(st.integers(0, 1))
    return {"x": (draw(st.integers(1, 2)), draw(st.integers(1, 3))) + sp, "attrs": attrs}


@st.composite
def slice_cases(draw, max_rank: int = 3):
    """ONNX-style slices: some axes (negative too), out-of-range and negative bounds, negative
    steps."""
    shape = draw(shapes(1, max_rank, 0, 5))
    chosen = draw(axes(len(shape), min_size=1))
    bound = st.integers(-7, 7) | st.sampled_from([-(2**62), 2**62])
    starts = tuple(draw(bound) for _ in chosen)
    ends = tuple(draw(bound) for _ in chosen)
    steps = tuple(draw(st.sampled_from([-3, -2, -1, 1, 2, 3])) for _ in chosen)
    attrs = {"starts": starts, "ends": ends, "axes": chosen, "steps": steps}
    if draw(st.booleans()) and chosen == tuple(range(len(chosen))):
        del attrs["axes"]
    return {"x": shape, "attrs": attrs}


# batched matmul, attention scores, diagonal, trace, transposes under '...', outer product, a chain
# of three, '...' dims that broadcast, implicit outputs
EINSUM_EQUATIONS = ("bij,bjk->bik", "bhqd,bhkd->bhqk", "ii->i", "ii", "...ij->...ji", "i,j", "ij,jk,kl->il",
                    "...ij,...jk->...ik", "ij,kj", "bij->b")


@st.composite
def einsum_cases(draw):
    """(equation, input shapes): one of `EINSUM_EQUATIONS` with drawn label sizes and '...' dims
    (as many in every input; those of the second input of size 1 now and then: broadcast)."""
    eq = draw(st.sampled_from(EINSUM_EQUATIONS))
    size = {c: draw(st.integers(1, 4)) for c in "bhqdkijl"}
    terms = eq.split("->")[0].split(",")
    batch = [draw(shapes(0, 2, 1, 3))] * len(terms)
    if eq.startswith("...ij,") and draw(st.booleans()):
        batch[1] = tuple(1 for _ in batch[0])
    return eq, [(b if "..." in t else ()) + tuple(size[c] for c in t.replace("...", "")) for t, b in zip(terms, batch)]
