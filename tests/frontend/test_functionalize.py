"""functionalize: the paper's programs and the imperative kernels equal their eager NumPy runs."""

import numpy as np
import pytest

import einsat
from benchmarks.imperative import KERNELS
from benchmarks.imperative.paper import figure2, figure4
from einsat.frontend import functionalize, trace
from einsat.frontend.evaluate import run_program
from einsat.ir import Op
from tests.frontend.oracle import as_list, assert_same, check, copies


@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_equals_numpy_exactly(name):
    kernel = KERNELS[name]
    args = kernel.inputs(np.random.default_rng(0))
    g = check(kernel.fn, *args)
    assert not any(n.op is Op.OPAQUE for n in g.nodes)
    # and before view-chain fusion too: the fusion laws change nothing observable
    check(kernel.fn, *args, fuse=False)


@pytest.mark.parametrize("name", list(KERNELS))
def test_traced_program_runs_like_the_function(name):
    """The recorded imperative program (real views, in-place copies) already equals the eager run."""
    kernel = KERNELS[name]
    args = kernel.inputs(np.random.default_rng(1))
    program = trace(kernel.fn, args)
    outs, _ = run_program(program, dict(zip(program.inputs, (a for a in args if isinstance(a, np.ndarray)))))
    assert_same(outs, as_list(kernel.fn(*copies(args))))


@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_graph_runs_on_other_data(name):
    """The graph is traced once; other inputs of the same types give NumPy's outputs too."""
    kernel = KERNELS[name]
    args = kernel.inputs(np.random.default_rng(2))
    other = kernel.inputs(np.random.default_rng(3))
    check(kernel.fn, *args, run_args=other)


def _body_ops(node, key="body"):
    return [n.op for n in node.attrs[key].nodes]


def test_figure4_becomes_the_papers_tensorssa_form():
    """Fig. 4(e): b is loop-carried; the body is access, add, assign through b[i]."""
    b = np.arange(12, dtype=np.float32).reshape(4, 3)
    g = functionalize(figure4, (b, np.array(2, np.int64)))
    (loop,) = g.nodes
    assert loop.op is Op.LOOP and loop.attrs["n_carried"] == 1
    assert loop.inputs[:2] == ("n", "b")  # the copy is gone: b itself is the initial value
    assert _body_ops(loop) == [Op.ACCESS, Op.ADD, Op.ASSIGN]
    access, _, assign = loop.attrs["body"].nodes
    assert access.attrs["spec"] == assign.attrs["spec"] == (("dselect", 0, 0),)
    for n in (0, 1, 4):
        check(figure4, b, np.array(2, np.int64), run_args=(b, np.array(n, np.int64)))


def test_figure2_returns_both_the_whole_and_the_partial_update():
    """Fig. 2: TorchScript returns only a from the branches; TensorSSA returns a and b."""
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    b = -np.arange(16, dtype=np.float32).reshape(4, 4)
    g = functionalize(figure2, (a, b, np.array(1)))
    (branch,) = [n for n in g.nodes if n.op is Op.IF]
    assert len(branch.outputs) == 2
    for key in ("then_branch", "else_branch"):
        assert Op.ASSIGN in _body_ops(branch, key)
    for idx in (2, 0, -1, -4):
        check(figure2, a, b, np.array(1), run_args=(a, b, np.array(idx)))
    assert set(g.outputs) == {"out0", "out1", "a_out", "b_out"}


def test_inputs_outputs_and_fixed_arguments():
    def f(x, scale, y, flag):
        z = x * scale
        if flag:  # a Python value: decided while tracing
            z = z + y
        return {"z": z, "y": y}

    x, y = np.ones((2, 3), np.float32), np.full((2, 3), 2, np.float32)
    g = functionalize(f, (x, 3, y, True))
    assert g.inputs == ("x", "y") and g.outputs == ("z", "y")
    r = einsat.run(g, {"x": x, "y": y})
    np.testing.assert_array_equal(r["z"], np.full((2, 3), 5, np.float32))


def test_an_input_updated_in_place_is_an_extra_output():
    def f(x):
        x[0] = -1
        x[1:] *= 2

    x = np.arange(6, dtype=np.int64).reshape(3, 2)
    g = check(f, x)
    assert g.outputs == ("x_out",)


def test_python_loops_unroll():
    def f(x):
        for k in range(3):
            x[k] += k
        return x

    g = check(f, np.zeros((4, 2), np.float32))
    assert not any(n.op is Op.LOOP for n in g.nodes)
