"""The onnxruntime backend matches the NumPy backend op by op and on the bundled models, and
caches one session per graph (and per equal exported model)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import einsat
from einsat.errors import ExecutionError
from einsat.ir import GraphBuilder, Op
from einsat.ir.registry import REGISTRY
from einsat.runtime import backend_onnxruntime, get_backend, run
from tests.gpu.cases import strategy
from tests.gpu.compare import assert_case
from tests.gpu.conftest import collect
from tests.ir.test_models import MODELS, assert_fp32_close, bert_feeds, filled, image

OPS = sorted(op.value for op in REGISTRY if op is not Op.OPAQUE)  # opaque: test_onnx_nodes.py
EXAMPLES = 6
# onnxruntime (CPU, 1.31) has no float64 kernel for these ops: such a graph fails, naming the node
# (an lrn of even size exports through an AveragePool, which has none either)
NO_FLOAT64 = {"avgpool": "AveragePool", "erf": "Erf", "leaky_relu": "LeakyRelu", "lrn": "(LRN|AveragePool)"}


@pytest.mark.parametrize("op", OPS)
def test_op_matches_the_numpy_backend(op):
    cases = collect(strategy(op), EXAMPLES)
    assert cases, f"no cases drawn for {op}"
    for case in cases:
        double = any(v.dtype == np.float64 for v in case.inputs.values())
        if double and op in NO_FLOAT64:
            with pytest.raises(ExecutionError, match=rf"NOT_IMPLEMENTED.*{NO_FLOAT64[op]}\(\d+\) node with name "
                                                     rf"'{case.graph.nodes[-1].name}"):
                run(case.graph, case.inputs, backend="onnxruntime")
            continue
        assert_case(case, run(case.graph, case.inputs, backend="onnxruntime"))


def compare_backends(g, feeds, keep=()):
    want = run(g, feeds, keep=keep)
    got = run(g, feeds, backend="onnxruntime", keep=keep)
    assert list(got) == list(want)
    for name in want:
        assert_fp32_close(got[name], want[name], f"{g.name}: {name}")


def test_resnet18_matches_the_numpy_backend():
    path = Path(einsat.__file__).parent / "data" / "resnet18.onnx"
    assert path.read_bytes() == (MODELS / "resnet18.onnx").read_bytes()  # the demo model is the test model
    g = einsat.load_onnx(filled(path))
    compare_backends(g, {"input": image()}, keep=(g.producer(g.outputs[0]).inputs[0],))


def test_bert_encoder_matches_the_numpy_backend():
    g = einsat.load_onnx(filled(MODELS / "bert_encoder.onnx"))
    compare_backends(g, bert_feeds())


def square_plus(x_shape=(2, 3)):
    b = GraphBuilder("square_plus")
    x = b.input("x", x_shape)
    return b.build(b.add(b.mul(x, x), b.weight("w", x_shape)))


def test_a_session_is_built_once_per_graph_and_shared_by_equal_graphs():
    be = get_backend("onnxruntime")
    g = square_plus()
    first = be.session(g, g.outputs)
    run(g, {"x": np.ones((2, 3), np.float32)}, backend=be)
    assert be.session(g, g.outputs) is first
    assert be.session(square_plus(), g.outputs) is first          # rebuilt, same structure and weights
    assert be.session(square_plus((3, 2)), ("add2",)) is not first  # another graph
    keep = be.session(g, (*g.outputs, "mul1"))                     # kept values: another session
    assert keep is not first and be.session(g, (*g.outputs, "mul1")) is keep


def test_old_sessions_are_dropped_past_the_limit(monkeypatch):
    monkeypatch.setattr(backend_onnxruntime, "MAX_SESSIONS", 2)
    be = backend_onnxruntime.OnnxruntimeBackend()
    graphs = [square_plus((k + 1, 2)) for k in range(3)]
    for g in graphs:
        be.session(g, g.outputs)
    assert len(be._by_model) == 2
    assert be.session(graphs[0], graphs[0].outputs)  # still cached by graph


def test_a_transposed_matrix_times_a_vector_is_right():
    """onnxruntime's MatmulTransposeFusion gets transpose(a) @ vector wrong: it is turned off there."""
    b = GraphBuilder("tmv")
    a, v = b.input("a", (9, 4)), b.input("v", (9,))
    g = b.build(b.matmul(b.transpose(a, perm=(1, 0)), v))
    rng = np.random.default_rng(0)
    feeds = {"a": rng.standard_normal((9, 4)).astype(np.float32), "v": rng.standard_normal(9).astype(np.float32)}
    np.testing.assert_allclose(run(g, feeds, backend="onnxruntime")[g.outputs[0]], feeds["a"].T @ feeds["v"],
                               rtol=1e-5, atol=1e-5)
    assert backend_onnxruntime.unsafe_optimizers(g) == ("MatmulTransposeFusion",)
    assert backend_onnxruntime.unsafe_optimizers(square_plus()) == ()


def test_a_graph_onnxruntime_cannot_run_names_the_graph_and_node():
    b = GraphBuilder("double_erf")
    x = b.input("x", (3,), np.float64)
    g = b.build(b.erf(x, name="the_erf"))
    with pytest.raises(ExecutionError, match=r"node 'double_erf' \(whole graph in onnxruntime\) with inputs "
                                             r"x: \[3\] f64 failed on backend 'onnxruntime'.*'the_erf"):
        run(g, {"x": np.ones(3)}, backend="onnxruntime")


def test_a_failing_session_prints_nothing_of_onnxruntimes_log():
    """onnxruntime logs a kernel's failure on stderr besides raising it ("[E:onnxruntime:, sequential_executor.cc
    ...] Non-zero status code ..."): einsat's sessions log nothing, the exception says it. In a fresh process:
    onnxruntime's default logger is per process."""
    import subprocess
    import sys
    code = """if True:
        import numpy as np
        from einsat.ir import GraphBuilder
        from einsat.ir.onnx.export import to_onnx
        from einsat.runtime.backend_onnxruntime import new_session
        b = GraphBuilder("nd")
        g = b.build(b.gather_nd(b.input("d", (1, 8), np.bool_), b.input("i", (1, 4, 2), np.int64)))
        session = new_session(to_onnx(g).SerializeToString(), threads=1)
        try:
            session.run(None, {"d": np.ones((1, 8), bool), "i": np.full((1, 4, 2), 3, np.int64)})
        except Exception as e:
            print("raised:", str(e).splitlines()[0])
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
    assert "raised:" in done.stdout and "invalid index found" in done.stdout
    assert done.stderr == ""
