"""Every flag of the op registry, checked against what the op does.

A flag is a promise (see `einsat.ir.registry`): for every op that sets one, the promise is
checked on cases drawn by `tests.gpu.cases.strategy(op)` (the case's last node applies the op;
its arguments are computed by the NumPy backend):

- view: with a contiguous first input holding its own flat positions, every output holds
  `offset + index · strides` (a strided view), and the GPU backend launches nothing for it;
- layout_only: every output element is an input element or a fill value (a float attribute);
- elementwise: an output element is unchanged when every input element but the ones it is
  computed from (after broadcasting) is redrawn;
- multilinear: in float64, the op is affine in each float input (the other inputs fixed) and
  maps all-zero float inputs to zero: a multi-linear polynomial without a constant term;
- foldable: the reference semantics are deterministic and leave the arguments untouched;
- repeats_input: the output is the first input broadcast to the output's shape (a weight-only
  application is never folded into a weight: it would store the repetition);
- tensor_core: on float inputs the GPU backend calls cuBLAS ("gemm") or cuDNN ("conv"), and
  no op without the flag calls either;
- bodies: exactly those attributes hold `ir.Graph`s;

and the facts other layers read (each replaced a table of op names; `einsat.ir.groups`):

- commutative: exchanging the first two inputs leaves the output unchanged;
- dtype_of_first / shape_of_first: the output's dtype (and shape) is the first input's;
- permutes / reshapes / aliases: every input element appears once in the output / in the same
  row-major order / the output is the input;
- ufunc / bool_ufunc / reduces: the NumPy ufunc (on bools) computes the op wherever it has a loop
  giving the op's dtype; a reduction is its binary op's `ufunc.reduce` over its axes;
- fused_core: with no bias, residual nor activation a fused op computes its core op;
- parameter_inputs: with those inputs fixed the op is affine in the other float inputs;
- exact_in_half: on half inputs the result equals the float64 result (of the same values) rounded;
- layout_commutes: a unary element-wise op commutes with transposes and reshapes;
- matched / derivable / eop_fusable: the op has a tensor-algebra expression (EinNet needs one);
- chain_fusable: it computes (not layout-only), deterministically, keeping a float input's dtype;
- comparison: a bool element-wise function of two inputs;
- correction: a mutant and a fix in, the mutant's (first input's) dtype out;
- nchwc: "blocked" ops take [N, C, *spatial] inputs, "carried" ones keep their input's rank; and on
  onnxruntime (where its CPU build blocks a convolution) a blocked op alone runs between reorders,
  a carried op after a blocked convolution before the one reorder out;
- per_position: the op takes [N, C, *spatial] inputs and keeps N and the spatial sizes at unit strides;
- stacks: the op on first inputs stacked along axis 0 gives their outputs stacked along axis 0;
- packed_inputs: tensor-core ops' weight slots.
"""

from __future__ import annotations

import numpy as np
import pytest

import einsat
from einsat.errors import ShapeError
from einsat.gpu.backend_cupy import GpuBackend
from einsat.ir import Graph
from einsat.ir.registry import REGISTRY, Op, OpDef
from tests.gpu.cases import strategy
from tests.gpu.conftest import collect
from tests.gpu.host_device import HostDevice

NOT_FLAGS = {"op", "attrs", "arity", "onnx_type", "onnx_domain", "doc"}
FLAGS = ("multilinear", "elementwise", "layout_only", "view", "foldable", "repeats_input", "tensor_core", "bodies",
         "commutative", "dtype_of_first", "shape_of_first", "permutes", "reshapes", "aliases", "ufunc", "bool_ufunc",
         "reduces", "fused_core", "parameter_inputs", "exact_in_half", "layout_commutes", "matched", "derivable",
         "eop_fusable", "chain_fusable", "comparison", "correction", "nchwc", "per_position", "stacks", "packed_inputs")
NO_CASES = {Op.OPAQUE}  # a black box: it promises nothing
EXAMPLES = 12
CASE_OPS = sorted((op for op in REGISTRY if op not in NO_CASES), key=lambda op: op.value)


def ops_with(flag: str) -> list[Op]:
    return [op for op in CASE_OPS if getattr(REGISTRY[op], flag) not in (None, False, ())]


def cases(op: Op) -> list:
    out = collect(strategy(op.value), EXAMPLES)
    assert out and all(c.graph.nodes[-1].op is op for c in out), f"tests/gpu/cases.py draws no {op.value} cases"
    return out


def call(case):
    """The node under test (the case's last node) and its arguments, by the NumPy backend."""
    g = case.graph
    *before, node = g.nodes
    values = {**case.inputs, **g.weights}
    if before:
        prefix = Graph(before, g.input_types(), [o for n in before for o in n.outputs], g.weights)
        values.update(einsat.run(prefix, case.inputs))
    return node, [values[i] if i else None for i in node.inputs]


def apply(node, args) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        return [np.asarray(o) for o in node.definition.numpy(args, node.attrs)]


def is_float(a) -> bool:
    return a is not None and np.issubdtype(a.dtype, np.floating)


def redraw(rng, like: np.ndarray) -> np.ndarray:
    """Fresh values of `like`'s shape and dtype."""
    if like.dtype == np.bool_:
        return np.asarray(rng.random(like.shape) < 0.5)
    if np.issubdtype(like.dtype, np.integer):
        return np.asarray(rng.integers(-5, 6, like.shape), like.dtype)
    return np.asarray(rng.standard_normal(like.shape) * 3, like.dtype)


def test_every_flag_has_a_check_here():
    flags = {name for name in OpDef.__annotations__ if name not in NOT_FLAGS}
    assert flags == set(FLAGS), f"a flag without a behaviour check here: {sorted(flags - set(FLAGS))}"


def test_ops_without_cases_promise_nothing():
    for op in NO_CASES:
        d = REGISTRY[op]
        assert not (d.multilinear or d.elementwise or d.layout_only or d.view or d.foldable or d.tensor_core)


@pytest.mark.parametrize("op", ops_with("view"), ids=lambda o: o.value)
def test_view_ops_return_strided_views_and_launch_nothing(op):
    assert REGISTRY[op].layout_only, "a view moves no data: it is layout-only"
    for case in cases(op):
        node, args = call(case)
        positions = np.arange(args[0].size, dtype=np.int64).reshape(args[0].shape)
        for out in apply(node, [positions, *args[1:]]):
            index = np.indices(out.shape)
            if out.size:
                origin = out[(0,) * out.ndim]
                strides = [out[tuple(int(k == d) for k in range(out.ndim))] - origin if n > 1 else 0
                           for d, n in enumerate(out.shape)]
                want = origin + sum(i * s for i, s in zip(index, strides))
                assert np.array_equal(out, want), f"{case}: output is no strided view of the input"
        single = Graph([node], {n: case.graph.types[n] for n in node.inputs if n}, node.outputs)
        device = HostDevice(None, dry=True)
        einsat.run(single, dict(zip(node.inputs, (np.array(a, order="C") for a in args))),
                   backend=GpuBackend(device, name="host-dry"))
        assert device.launches == 0, f"{case}: the GPU backend launched {device.launches} kernel(s)"


@pytest.mark.parametrize("op", ops_with("repeats_input"), ids=lambda o: o.value)
def test_repeating_ops_broadcast_their_input(op):
    grew = 0
    for case in cases(op):
        node, args = call(case)
        (out,) = apply(node, args)
        np.testing.assert_array_equal(out, np.broadcast_to(args[0], out.shape), err_msg=str(case))
        grew += out.size > args[0].size
    assert grew, f"no {op.value} case repeated its input"


@pytest.mark.parametrize("op", ops_with("layout_only"), ids=lambda o: o.value)
def test_layout_only_ops_only_move_elements(op):
    d = REGISTRY[op]
    checked = 0
    for case in cases(op):
        node, args = call(case)
        fills = {float(node.attrs[n]) for n, spec in d.attrs.items() if spec.kind == "float"}
        probes, start = [], 10.0
        for a in args:
            if is_float(a):  # distinct values of both signs, disjoint between inputs
                k = np.arange(a.size)
                a = ((start + k) * np.where(k % 2, -0.5, 0.5)).reshape(a.shape)
                start += a.size + 1
            probes.append(a)
        data = {float(v) for a in probes if is_float(a) for v in a.ravel()}
        if not data:
            continue
        for out in apply(node, probes):
            assert out.dtype == np.float64, f"{case}: a layout op changed the dtype to {out.dtype}"
            assert set(out.ravel().tolist()) <= data | fills, f"{case}: an output element is no input element"
        checked += 1
    assert checked, f"no {op.value} case had float data"


@pytest.mark.parametrize("op", ops_with("elementwise"), ids=lambda o: o.value)
def test_elementwise_outputs_depend_on_their_own_elements(op):
    rng = np.random.default_rng(0)
    for case in cases(op):
        node, args = call(case)
        (out,) = apply(node, args)
        for at in zip(*(rng.integers(0, n, 3) for n in out.shape)) if out.size else []:
            kept = []
            for a in args:
                src = tuple(0 if n == 1 else at[out.ndim - a.ndim + k] for k, n in enumerate(a.shape))
                b = redraw(rng, a)
                b[src] = a[src]
                kept.append(b)
            (other,) = apply(node, kept)
            assert np.array_equal(other[at], out[at], equal_nan=True), \
                f"{case}: output {at} changed when other input elements did"


@pytest.mark.parametrize("op", ops_with("multilinear"), ids=lambda o: o.value)
def test_multilinear_ops_are_affine_in_each_input_and_vanish_at_zero(op):
    rng = np.random.default_rng(0)
    checked = 0
    for case in cases(op):
        node, args = call(case)
        if not node.definition.is_multilinear(node.attrs):
            continue
        args = [a.astype(np.float64) if is_float(a) else a for a in args]
        slots = [k for k, a in enumerate(args) if is_float(a)]
        if not slots:
            continue  # integer data: the field of reals says nothing about it
        zeros = [np.zeros_like(a) if k in slots else a for k, a in enumerate(args)]
        for out in apply(node, zeros):
            assert not out.any(), f"{case}: all-zero inputs give a nonzero output (a constant term)"
        for k in slots:
            def f(v):
                return apply(node, args[:k] + [v] + args[k + 1:])
            x, y = rng.standard_normal(args[k].shape), rng.standard_normal(args[k].shape)
            a, b = rng.standard_normal(2)
            for mixed, fx, fy, f0 in zip(f(a * x + b * y), f(x), f(y), f(np.zeros_like(x))):
                want = a * (fx - f0) + b * (fy - f0)
                scale = 1e-9 * max(1.0, float(np.abs(fx).max(initial=0)), float(np.abs(fy).max(initial=0)))
                np.testing.assert_allclose(mixed - f0, want, rtol=1e-9, atol=scale,
                                           err_msg=f"{case}: not affine in input {k}")
        checked += 1
    assert checked, f"no {op.value} case was multi-linear"


@pytest.mark.parametrize("op", ops_with("foldable"), ids=lambda o: o.value)
def test_foldable_ops_are_deterministic_and_pure(op):
    for case in cases(op)[:4]:
        node, args = call(case)
        before = [None if a is None else a.copy() for a in args]
        first, second = apply(node, args), apply(node, args)
        for a, b in zip(first, second):
            assert a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), f"{case}"
        for a, b in zip(args, before):
            assert a is None or np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), f"{case}: an argument changed"


@pytest.mark.parametrize("op", CASE_OPS, ids=lambda o: o.value)
def test_tensor_core_ops_and_only_they_call_cublas_or_cudnn(op):
    family = REGISTRY[op].tensor_core
    assert family in (None, "gemm", "conv")
    checked = 0
    for case in cases(op)[:6]:
        if not all(np.issubdtype(a.dtype, np.floating) for a in case.inputs.values()):
            continue  # integer products run on einsat's own kernels
        device = HostDevice(None, dry=True)
        einsat.run(case.graph, case.inputs, backend=GpuBackend(device, name="host-dry"))
        calls = {"gemm": device.gemm_calls, "conv": device.conv_calls}
        assert {f for f, n in calls.items() if n} == ({family} if family else set()), f"{case}: {calls}"
        checked += 1
    assert checked or family is None, f"no float {op.value} case"


@pytest.mark.parametrize("op", CASE_OPS, ids=lambda o: o.value)
def test_bodies_are_the_attributes_that_hold_graphs(op):
    for case in cases(op)[:3]:
        node = case.graph.nodes[-1]
        graphs = {name for name, value in node.attrs.items() if isinstance(value, Graph)}
        assert graphs == set(REGISTRY[op].bodies), f"{case}"


# -- the facts other layers read -----------------------------------------------------------------

def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")


def positions(a: np.ndarray) -> np.ndarray:
    """Distinct float64 values, one per element, in `a`'s shape."""
    return np.arange(1, a.size + 1, dtype=np.float64).reshape(a.shape)


def test_fact_types():
    for op, d in REGISTRY.items():
        for flag in ("commutative", "dtype_of_first", "shape_of_first", "permutes", "reshapes", "aliases",
                     "exact_in_half", "layout_commutes", "derivable", "eop_fusable", "chain_fusable", "comparison",
                     "correction", "per_position", "stacks"):
            assert isinstance(getattr(d, flag), bool), f"{op.value}.{flag} must be a bool"
        for flag in ("reduces", "fused_core"):
            assert getattr(d, flag) is None or getattr(d, flag) in REGISTRY, f"{op.value}.{flag} names no op"
        for flag in ("parameter_inputs", "packed_inputs"):
            slots = getattr(d, flag)
            assert isinstance(slots, tuple) and all(0 <= k and (d.arity[1] is None or k < d.arity[1]) for k in slots), \
                f"{op.value}.{flag} names no input"
        for flag in ("ufunc", "bool_ufunc"):
            assert getattr(d, flag) is None or isinstance(getattr(d, flag), np.ufunc), f"{op.value}.{flag}"
        assert d.matched is None or isinstance(d.matched, int)
        assert d.nchwc in (None, "blocked", "carried")
        assert not d.reshapes or d.permutes, f"{op.value}: a reshape permutes"
        assert not d.aliases or d.reshapes, f"{op.value}: an alias is a reshape"
        assert not d.permutes or d.layout_only, f"{op.value}: a permutation is layout-only"
    ranks = [d.matched for d in REGISTRY.values() if d.matched is not None]
    assert len(ranks) == len(set(ranks)), "two matched ops share a rank"
    assert not REGISTRY[Op.OPAQUE].dtype_of_first, "a black box promises nothing"


@pytest.mark.parametrize("op", ops_with("commutative"), ids=lambda o: o.value)
def test_commutative_ops_take_their_inputs_in_either_order(op):
    for case in cases(op):
        node, args = call(case)
        for a, b in zip(apply(node, args), apply(node, [args[1], args[0], *args[2:]])):
            assert same(a, b), f"{case}: exchanging the inputs changed the output"


@pytest.mark.parametrize("op", ops_with("dtype_of_first"), ids=lambda o: o.value)
def test_output_dtype_is_the_first_inputs(op):
    for case in cases(op):
        node, args = call(case)
        for out in apply(node, args):
            assert out.dtype == args[0].dtype, f"{case}: {out.dtype}, the first input {args[0].dtype}"


@pytest.mark.parametrize("op", ops_with("shape_of_first"), ids=lambda o: o.value)
def test_output_type_is_the_first_inputs(op):
    for case in cases(op):
        node, args = call(case)
        (out,) = apply(node, args)
        assert (out.shape, out.dtype) == (args[0].shape, args[0].dtype), f"{case}"


@pytest.mark.parametrize("op", ops_with("permutes"), ids=lambda o: o.value)
def test_permuting_ops_keep_every_element_once(op):
    d = REGISTRY[op]
    for case in cases(op):
        node, args = call(case)
        probe = positions(args[0])
        (out,) = apply(node, [probe, *args[1:]])
        assert np.array_equal(np.sort(out.ravel()), probe.ravel()), f"{case}: not a permutation of the input"
        if d.reshapes:
            assert np.array_equal(out.ravel(), probe.ravel()), f"{case}: the order changed"
        if d.aliases:
            assert same(out, probe), f"{case}: not the input itself"


@pytest.mark.parametrize("op", ops_with("ufunc") + ops_with("bool_ufunc"), ids=lambda o: o.value)
def test_ufuncs_compute_their_ops(op):
    d = REGISTRY[op]
    checked = 0
    for case in cases(op):
        node, args = call(case)
        for fn in (d.ufunc, d.bool_ufunc):
            if fn is None or (fn is d.bool_ufunc and any(a.dtype != np.bool_ for a in args)):
                continue
            try:
                want = fn(*args)
            except TypeError:  # no loop for these dtypes: the frontend refuses them too
                continue
            (out,) = apply(node, args)
            if want.dtype != out.dtype:
                continue  # e.g. np.divide on integers is true division, divide truncates
            np.testing.assert_allclose(out, want, rtol=1e-6, err_msg=f"{case}: np.{fn.__name__}")
            checked += 1
    assert checked, f"no {op.value} case was computed by its ufunc"


@pytest.mark.parametrize("op", ops_with("reduces"), ids=lambda o: o.value)
def test_reductions_fold_their_binary_op(op):
    fn = REGISTRY[REGISTRY[op].reduces].ufunc
    for case in cases(op):
        node, args = call(case)
        (out,) = apply(node, args)
        want = fn.reduce(args[0], axis=node.attrs["axes"], keepdims=bool(node.attrs["keepdims"]))
        np.testing.assert_allclose(out, want, rtol=1e-6, err_msg=f"{case}")


@pytest.mark.parametrize("op", ops_with("fused_core"), ids=lambda o: o.value)
def test_fused_ops_compute_their_core_without_an_epilogue(op):
    core = REGISTRY[REGISTRY[op].fused_core]
    assert core.tensor_core == REGISTRY[op].tensor_core
    for case in cases(op):
        node, args = call(case)
        attrs = {**node.attrs, "activation": "none"}
        (out,) = REGISTRY[op].numpy(args[:2], attrs)
        (want,) = core.numpy(args[:2], {k: v for k, v in node.attrs.items() if k in core.attrs})
        np.testing.assert_allclose(out, want, rtol=1e-6, err_msg=f"{case}")


@pytest.mark.parametrize("op", ops_with("parameter_inputs"), ids=lambda o: o.value)
def test_ops_are_affine_once_their_parameters_are_fixed(op):
    d = REGISTRY[op]
    rng = np.random.default_rng(0)
    checked = 0
    for case in cases(op):
        node, args = call(case)
        args = [a.astype(np.float64) if is_float(a) else a for a in args]
        for k in (k for k, a in enumerate(args) if is_float(a) and k not in d.parameter_inputs):
            def f(v):
                return apply(node, args[:k] + [v] + args[k + 1:])
            x, y = rng.standard_normal(args[k].shape), rng.standard_normal(args[k].shape)
            a, b = rng.standard_normal(2)
            for mixed, fx, fy, f0 in zip(f(a * x + b * y), f(x), f(y), f(np.zeros_like(x))):
                scale = 1e-9 * max(1.0, float(np.abs(fx).max(initial=0)), float(np.abs(fy).max(initial=0)))
                np.testing.assert_allclose(mixed - f0, a * (fx - f0) + b * (fy - f0), rtol=1e-9, atol=scale,
                                           err_msg=f"{case}: not affine in input {k}")
            checked += 1
    assert checked, f"no {op.value} case had a float input besides its parameters"


@pytest.mark.parametrize("op", ops_with("exact_in_half"), ids=lambda o: o.value)
def test_exact_ops_round_nothing_in_half_precision(op):
    rng = np.random.default_rng(0)
    checked = 0
    for case in cases(op):
        node, args = call(case)
        if not any(is_float(a) for a in args):
            continue
        half = [np.asarray(rng.standard_normal(a.shape) * 3, np.float16) if is_float(a) else a for a in args]
        wide = [h.astype(np.float64) if is_float(h) else h for h in half]
        for h, w in zip(apply(node, half), apply(node, wide)):
            assert same(h, w.astype(h.dtype)) and (not is_float(w) or h.dtype == np.float16), \
                f"{case}: the half result is no half operand's value"
        checked += 1
    assert checked, f"no {op.value} case had float data"


@pytest.mark.parametrize("op", ops_with("layout_commutes"), ids=lambda o: o.value)
def test_layout_commuting_ops_move_through_transposes_and_reshapes(op):
    d = REGISTRY[op]
    assert d.elementwise and d.arity == (1, 1)
    for case in cases(op):
        node, args = call(case)
        (x,) = args
        (out,) = apply(node, [x])
        (moved,) = apply(node, [x.T])
        assert same(moved, out.T), f"{case}: f(transpose(x)) != transpose(f(x))"
        (flat,) = apply(node, [x.reshape(-1)])
        assert same(flat, out.reshape(-1)), f"{case}: f(reshape(x)) != reshape(f(x))"


@pytest.mark.parametrize("op", sorted(set(ops_with("matched") + ops_with("derivable") + ops_with("eop_fusable")),
                                      key=lambda o: o.value), ids=lambda o: o.value)
def test_ops_einnet_derives_have_an_expression(op):
    d = REGISTRY[op]
    found = 0
    for case in cases(op):
        node = case.graph.nodes[-1]
        ins = [case.graph.types[i] if i else None for i in node.inputs]
        found += d.expression(ins, node.attrs) is not None
    assert found, f"no {op.value} case has a tensor-algebra expression"


@pytest.mark.parametrize("op", ops_with("chain_fusable"), ids=lambda o: o.value)
def test_chain_fusable_ops_compute_and_keep_a_float_dtype(op):
    d = REGISTRY[op]
    assert d.foldable and not d.layout_only
    for case in cases(op):
        node, args = call(case)
        for out in apply(node, args):
            assert not is_float(args[0]) or out.dtype == args[0].dtype, f"{case}"


@pytest.mark.parametrize("op", ops_with("comparison"), ids=lambda o: o.value)
def test_comparisons_are_bool_and_element_wise(op):
    assert REGISTRY[op].elementwise and REGISTRY[op].arity == (2, 2)
    for case in cases(op):
        node, args = call(case)
        (out,) = apply(node, args)
        assert out.dtype == np.bool_ and args[0].dtype == args[1].dtype, f"{case}"


@pytest.mark.parametrize("op", ops_with("correction"), ids=lambda o: o.value)
def test_corrections_have_their_mutants_dtype(op):
    assert REGISTRY[op].arity[0] >= 2, "a mutant and a fix"
    for case in cases(op):
        node, args = call(case)
        (out,) = apply(node, args)
        assert out.dtype == args[0].dtype, f"{case}"


@pytest.mark.parametrize("op", ops_with("nchwc"), ids=lambda o: o.value)
def test_nchwc_ops_take_images(op):
    blocked = REGISTRY[op].nchwc == "blocked"
    for case in cases(op):
        node, args = call(case)
        (out,) = apply(node, args)
        if blocked:
            assert args[0].ndim >= 3 and out.ndim == args[0].ndim, f"{case}: no [N, C, *spatial] op"
        else:
            assert out.ndim == max(a.ndim for a in args), f"{case}: the rank changed"


def test_packed_inputs_are_tensor_core_weights():
    for op in ops_with("packed_inputs"):
        assert REGISTRY[op].tensor_core is not None and 0 not in REGISTRY[op].packed_inputs, op.value


@pytest.mark.parametrize("op", ops_with("per_position"), ids=lambda o: o.value)
def test_per_position_ops_compute_the_same_at_every_position(op):
    """At unit strides without padding, dropping the first position of the last spatial dim drops
    the first output position: out(x[..., 1:]) = out(x)[..., 1:]."""
    checked = 0
    for case in cases(op):
        node, args = call(case)
        attrs = dict(node.attrs)
        for name, fill in (("stride", 1), ("padding", 0)):
            if name in attrs:
                attrs[name] = (fill,) * len(attrs[name])
        if "ceil_mode" in attrs:
            attrs["ceil_mode"] = 0
        try:
            (out,) = REGISTRY[op].numpy(args, attrs)
            (cropped,) = REGISTRY[op].numpy([args[0][..., 1:], *args[1:]], attrs)
        except (ValueError, ShapeError):
            continue  # the window no longer fits
        assert args[0].ndim >= 2 and out.ndim == args[0].ndim, f"{case}: no [N, C, *spatial] op"
        if args[0].ndim < 3 or out.shape[-1] < 2:
            continue
        np.testing.assert_allclose(cropped, out[..., 1:], rtol=1e-5, atol=1e-6, err_msg=f"{case}")
        checked += 1
    assert checked, f"no {op.value} case with a spatial dim"


# onnxruntime's blocked layout, checked on onnxruntime itself (where its CPU build has one)

def _ort_nodes(graph) -> list[str]:
    """The op types of onnxruntime's fully optimized version of `graph`."""
    import os
    import tempfile

    import onnx
    import onnxruntime as ort

    from einsat.ir.onnx.export import to_onnx
    with tempfile.TemporaryDirectory() as d:
        so = ort.SessionOptions()
        so.optimized_model_filepath = os.path.join(d, "o.onnx")
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.log_severity_level = 3
        ort.InferenceSession(to_onnx(graph).SerializeToString(), so, providers=["CPUExecutionProvider"])
        return [n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node]


def _image_graph(op: Op | None, after_conv: bool):
    """x [1, 16, 8, 8] (through a 3x3 conv keeping its shape if `after_conv`), then `op`."""
    from einsat.ir import GraphBuilder
    b = GraphBuilder("nchwc", seed=0)
    x = b.input("x", (1, 16, 8, 8))
    if after_conv:
        x = b.conv(x, b.weight("w", (16, 16, 3, 3)), padding=(1, 1, 1, 1))
    if op is None:
        return b.build(x)
    args = {Op.CONV: lambda: b.conv(x, b.weight("k", (16, 16, 3, 3)), padding=(1, 1, 1, 1)),
            Op.FUSED_CONV: lambda: b.fused_conv(x, b.weight("k", (16, 16, 3, 3)), padding=(1, 1, 1, 1)),
            Op.MAXPOOL: lambda: b.maxpool(x, kernel=(2, 2)), Op.AVGPOOL: lambda: b.avgpool(x, kernel=(2, 2)),
            Op.GLOBAL_AVGPOOL: lambda: b.global_avgpool(x),
            Op.BATCHNORM: lambda: b.batchnorm(x, *(b.weight(None, (16,)) for _ in range(3)),
                                              b.weight(None, np.full(16, 2.0, np.float32))),
            Op.ADD: lambda: b.add(x, b.relu(x)), Op.MUL: lambda: b.mul(x, b.relu(x)),
            Op.CONCAT: lambda: b.concat(x, b.relu(x), axis=1)}
    y = args[op]() if op in args else b.op(op, x)
    return b.build(y)


@pytest.mark.parametrize("op", ops_with("nchwc"), ids=lambda o: o.value)
def test_nchwc_ops_run_in_onnxruntimes_blocked_layout(op):
    """A "blocked" op alone runs between a ReorderInput and a ReorderOutput; a "carried" op after a
    blocked convolution runs before the ReorderOutput (one reorder out, last)."""
    if "ReorderInput" not in _ort_nodes(_image_graph(None, after_conv=True)):
        pytest.skip("this onnxruntime build has no blocked layout on this CPU")
    if REGISTRY[op].nchwc == "blocked":
        nodes = _ort_nodes(_image_graph(op, after_conv=False))
        assert "ReorderInput" in nodes and "ReorderOutput" in nodes, nodes
    else:
        nodes = _ort_nodes(_image_graph(op, after_conv=True))
        assert nodes.count("ReorderOutput") == 1 and nodes[-1] == "ReorderOutput", nodes


@pytest.mark.parametrize("op", ops_with("stacks"), ids=lambda o: o.value)
def test_stacking_ops_stack_their_outputs(op):
    rng = np.random.default_rng(0)
    checked = 0
    for case in cases(op):
        node, args = call(case)
        if args[0].ndim < 2:
            continue  # a vector's one axis is the one contracted
        other = redraw(rng, args[0])
        (a,), (b,) = apply(node, args), apply(node, [other, *args[1:]])
        (both,) = apply(node, [np.concatenate([args[0], other]), *args[1:]])
        np.testing.assert_allclose(both, np.concatenate([a, b]), rtol=1e-5, atol=1e-5, err_msg=f"{case}")
        checked += 1
    assert checked, f"no {op.value} case with a first input of rank 2 or more"
