"""The one interpreter loop: errors that name the step, values freed when dead, kept values,
hooks, and loop/if bodies run through the same loop on the caller's backend."""

from __future__ import annotations

import subprocess
import sys
import weakref

import numpy as np
import pytest

from einsat.errors import EinsatError, ExecutionError
from einsat.ir import GraphBuilder, Op
from einsat.ir.registry import opdef
from einsat.runtime import GraphRuns, Hooks, backend_names, evaluate, get_backend, graph_runs, register_backend, run
from einsat.runtime.backend_numpy import NumpyBackend

F = np.float32


def chain(n=4):
    b = GraphBuilder("chain")
    x = b.input("x", (3,))
    y = x
    for k in range(n):
        y = b.relu(y, name=f"r{k}")
    return b.build(y)


def counting_loop():
    """out = loop(n, acc=x; acc' = acc + w)"""
    body = GraphBuilder("body")
    _, acc, w = body.input("i", (), np.int64), body.input("acc", (2,)), body.input("w", (2,))
    g_body = body.build(body.add(acc, w))
    b = GraphBuilder("outer")
    n, x, w = b.input("n", (), np.int64), b.input("x", (2,)), b.input("w", (2,))
    return b.build(b.loop(n, x, w, body=g_body, n_carried=1)), g_body


def test_a_failing_node_is_named_with_its_op_input_types_and_backend():
    b = GraphBuilder("g")
    x, i = b.input("x", (4, 3)), b.input("i", (2,), np.int64)
    g = b.build(b.gather(x, i, axis=0, name="pick"))
    with pytest.raises(ExecutionError, match=r"node 'pick' \(gather\) with inputs x: \[4, 3\] f32, "
                                             r"i: \[2\] i64 failed on backend 'numpy': IndexError"):
        run(g, {"x": np.ones((4, 3), F), "i": np.array([0, 9])})


def test_values_are_freed_once_no_later_node_reads_them():
    g = chain(4)
    alive = {}

    class Watch(Hooks):
        def after(self, graph, k, step, args, outs):
            alive[step.outputs[0]] = weakref.ref(outs[0])

        def before(self, graph, k, step, args):
            if k == 3:  # r0's value was read by r1 (step 1) only
                assert alive["r0"]() is None and alive["r2"]() is not None

    out = evaluate(g, {"x": np.ones(3, F)}, get_backend("numpy"), Watch())
    assert list(out) == ["r3"] and len(alive) == 4


def test_kept_values_come_back_after_the_outputs():
    g = chain(3)
    out = run(g, {"x": np.array([-1, 0, 2], F)}, keep=("r0",))
    assert list(out) == ["r2", "r0"]
    np.testing.assert_array_equal(out["r0"], [0, 0, 2])


def test_unknown_backend_names_the_choices():
    with pytest.raises(EinsatError, match="numpy.*onnxruntime.*cupy"):
        run(chain(1), {"x": np.ones(3, F)}, backend="tpu")


def test_a_registered_backend_is_found_by_name(monkeypatch):
    """A backend registers itself by name; `run` and `get_backend` then find it."""
    from einsat.runtime import backend as registry
    monkeypatch.setattr(registry, "_FACTORIES", dict(registry._FACTORIES))  # leave the real table alone
    made = []

    class Doubling(NumpyBackend):
        name = "doubling"

        def run_node(self, node, args, graph):
            return [2 * o for o in super().run_node(node, args, graph)]

    register_backend("doubling", lambda: made.append(1) or Doubling())
    assert backend_names()[-1] == "doubling" and {"numpy", "onnxruntime", "cupy"} <= set(backend_names())
    out = run(chain(2), {"x": np.array([-1, 1, 3], F)}, backend="doubling")
    np.testing.assert_array_equal(out["r1"], [0, 4, 12])
    assert made == [1]
    with pytest.raises(EinsatError, match="callable"):
        register_backend("broken", None)


def test_the_cupy_backend_is_registered_from_above_the_runtime():
    """The runtime does not import `einsat.gpu`: `cupy` is registered by `einsat.backends`
    (the top level), and asking for it loads the GPU package; a fresh interpreter shows both."""
    code = ("import sys; from einsat.runtime import backend_names, get_backend; "
            "assert 'einsat.gpu' not in sys.modules, 'importing the runtime loaded einsat.gpu'; "
            "names = backend_names(); be = get_backend('cupy'); "
            "print(names, type(be).__module__, 'cupy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["('numpy',", "'onnxruntime',", "'cupy')", "einsat.gpu.backend_cupy", "False"]


def test_the_cupy_backend_without_cupy_says_to_install_the_gpu_extra(monkeypatch):
    pytest.importorskip("einsat.gpu.backend_cupy")
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy is installed: this checks the message where it is not")
    except ImportError:
        pass
    from einsat.gpu import device
    monkeypatch.setattr(device, "cuda_driver_present", lambda: True)  # a GPU machine without CuPy
    with pytest.raises(EinsatError, match=r"einsat\[gpu\]"):
        run(chain(1), {"x": np.ones(3, F)}, backend="cupy")
    monkeypatch.setattr(device, "cuda_driver_present", lambda: False)  # no GPU: CuPy would not help
    with pytest.raises(EinsatError, match=r"no NVIDIA GPU"):
        run(chain(1), {"x": np.ones(3, F)}, backend="cupy")


def test_loop_bodies_run_through_the_loop_with_the_callers_hooks():
    g, body = counting_loop()
    feeds = {"n": np.array(3, np.int64), "x": np.zeros(2, F), "w": np.array([1, 2], F)}
    runs = graph_runs(g, feeds)
    assert runs == {g: 1, body: 3}
    np.testing.assert_array_equal(run(g, feeds)[g.outputs[0]], [3, 6])


def test_bodies_use_the_callers_backend():
    calls = []

    class Recording(NumpyBackend):
        def run_node(self, node, args, graph):
            calls.append((graph.name, node.op))
            return super().run_node(node, args, graph)

    g, _ = counting_loop()
    run(g, {"n": np.array(2, np.int64), "x": np.zeros(2, F), "w": np.ones(2, F)}, backend=Recording())
    assert calls == [("body", Op.ADD)] * 2  # the loop node itself is the interpreter's


def test_a_failure_in_a_body_names_the_body_and_its_node():
    body = GraphBuilder("pick_body")
    i, acc, rows = body.input("i", (), np.int64), body.input("acc", (1, 3)), body.input("rows", (2, 3))
    index = body.unsqueeze(body.add(i, body.const(5, np.int64)), axes=(0,))
    g_body = body.build(body.add(acc, body.gather(rows, index, axis=0, name="bad_gather")))
    b = GraphBuilder("outer")
    n, acc, rows = b.input("n", (), np.int64), b.input("acc", (1, 3)), b.input("rows", (2, 3))
    g = b.build(b.loop(n, acc, rows, body=g_body, n_carried=1))
    with pytest.raises(ExecutionError, match=r"in body 'pick_body': node 'bad_gather' \(gather\).*IndexError"):
        run(g, {"n": np.array(1, np.int64), "acc": np.zeros((1, 3), F), "rows": np.ones((2, 3), F)})


def test_a_body_op_has_no_numpy_of_its_own():
    with pytest.raises(ExecutionError, match="einsat.run"):
        opdef(Op.LOOP).numpy([np.array(1)], {"n_carried": 0})


def test_graph_runs_counts_a_branch_only_when_taken():
    then, other = GraphBuilder("then"), GraphBuilder("else")
    a, c = then.input("a", (2,)), other.input("a", (2,))
    g_then, g_else = then.build(then.relu(a)), other.build(other.neg(c))
    b = GraphBuilder("outer")
    p, a = b.input("p", (), np.bool_), b.input("a", (2,))
    g = b.build(b.if_(p, a, then_branch=g_then, else_branch=g_else))
    hooks = GraphRuns()
    run(g, {"p": np.array(False), "a": np.ones(2, F)}, hooks=hooks)
    assert hooks.counts == {g: 1, g_else: 1}


def test_running_on_numpy_loads_neither_onnx_nor_onnxruntime():
    code = ("import sys, numpy as np, einsat\n"
            "b = einsat.GraphBuilder('g'); x = b.input('x', (2,)); g = b.build(b.relu(x))\n"
            "einsat.run(g, {'x': np.ones(2, np.float32)})\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('onnx', 'onnxruntime')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_missing_stripped_weights_are_named_as_such_with_the_way_to_fill_them(tmp_path):
    import einsat
    from einsat.errors import InputError
    from tests.cli.test_optimize import stripped_model
    names = stripped_model(tmp_path / "s.onnx")
    g = einsat.load_onnx(tmp_path / "s.onnx")
    with pytest.raises(InputError) as e:
        einsat.run(g, {"x": np.zeros((1, 8, 10, 10), F)})
    text = str(e.value)
    assert f"the model's {len(names)} stripped weights" in text and "einsat.stripped_weights" in text
    assert "fill_weights='random'" in text and "--fill-weights random" in text
    assert len(text) < 600  # a count and a few names, not every weight
    filled = einsat.load_onnx(tmp_path / "s.onnx", fill_weights="random")
    assert set(filled.weights) == set(names) and filled.inputs == ("x",)
    assert einsat.run(filled, {"x": np.zeros((1, 8, 10, 10), F)})  # the way out works
    with pytest.raises(InputError) as e:  # a real input missing is said as before
        einsat.run(filled, {})
    assert "is missing input(s) 'x'" in str(e.value) and "stripped" not in str(e.value)
