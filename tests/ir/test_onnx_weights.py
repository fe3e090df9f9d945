"""Random weights by role (`einsat.ir.onnx.weights`): each weight of a small model gets the
distribution of its role where it is consumed, with the fan-in of the axis its consumer sums."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import einsat
from einsat.ir.onnx.weights import random_weight, random_weights, weight_roles

F = TensorProto.FLOAT


def model() -> onnx.ModelProto:
    inits = {"k": (16, 3, 3, 3), "kb": (16,), "s": (16,), "sh": (16,), "m": (16,), "v": (16,),
             "fc": (10, 16 * 8 * 8), "fcb": (10,), "emb": (50, 32), "g": (32,), "beta": (32,),
             "wt": (64, 32), "wb": (64,)}
    nodes = [helper.make_node("Conv", ["x", "k", "kb"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "sh", "m", "v"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], transB=1),
             helper.make_node("Gather", ["emb", "ids"], ["e"]),
             helper.make_node("LayerNormalization", ["e", "g", "beta"], ["ln"], axis=-1),
             helper.make_node("Transpose", ["wt"], ["w"], perm=[1, 0]),
             helper.make_node("MatMul", ["ln", "w"], ["h"]),
             helper.make_node("Add", ["h", "wb"], ["hidden"])]
    graph = helper.make_graph(
        nodes, "roles", [helper.make_tensor_value_info("x", F, [1, 3, 8, 8]),
                         helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 12])],
        [helper.make_tensor_value_info("logits", F, [1, 10]), helper.make_tensor_value_info("hidden", F, [1, 12, 64])],
        initializer=[numpy_helper.from_array(np.zeros(s, np.float32), n) for n, s in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_roles_and_fan_in_come_from_the_consuming_op():
    m = model()
    shapes = {i.name: tuple(i.dims) for i in m.graph.initializer}
    roles = weight_roles(m.graph, shapes)
    assert roles["k"] == ("kernel", 27) and roles["kb"] == ("bias", 27)
    assert roles["s"][0] == roles["v"][0] == "scale" and roles["sh"][0] == roles["m"][0] == "shift"
    assert roles["fc"] == ("matrix", 1024) and roles["fcb"] == ("bias", 1024)   # Gemm transB: (N, K)
    assert roles["emb"][0] == "embedding" and roles["g"][0] == "scale" and roles["beta"][0] == "shift"
    assert roles["wt"] == ("matrix", 32)    # through the Transpose: (64, 32) -> (32, 64), K = 32
    assert roles["wb"] == ("bias", 64)


@pytest.mark.parametrize("role,fan_in,low,high", [("kernel", 27, -np.sqrt(6 / 27), np.sqrt(6 / 27)),
                                                  ("matrix", 1024, -1 / 32, 1 / 32), ("bias", 64, -1 / 8, 1 / 8),
                                                  ("scale", None, 0.9, 1.1), ("shift", None, -0.1, 0.1)])
def test_uniform_roles_fill_their_range(role, fan_in, low, high):
    w = random_weight("w", (100, 50), np.float32, 0, role, fan_in)
    assert low <= w.min() < low + 0.02 * (high - low) and high - 0.02 * (high - low) < w.max() <= high
    assert abs(w.mean() - (low + high) / 2) < 0.02 * (high - low)


def test_embeddings_are_standard_normal_and_roles_are_checked():
    e = random_weight("emb", (200, 100), np.float32, 0, "embedding")
    assert abs(e.mean()) < 0.02 and abs(e.std() - 1) < 0.02
    with pytest.raises(ValueError, match="unknown role"):
        random_weight("w", (2, 2), np.float32, 0, "weights")


def test_filled_model_keeps_activations_of_order_one():
    """With these weights the logits vary with the input and stay of order one."""
    _, values = random_weights(model(), seed=0)
    assert np.all(values["v"] > 0)
    g = einsat.load_onnx(model(), fill_weights="random")
    rng = np.random.default_rng(0)
    runs = [einsat.run(g, {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32),
                           "ids": rng.integers(0, 50, (1, 12))}) for _ in range(2)]
    logits = runs[0]["logits"]
    assert 0.05 < np.abs(logits).max() < 20
    assert np.abs(runs[0]["logits"] - runs[1]["logits"]).max() > 0.1 * np.abs(logits).max()
    assert 0.1 < runs[0]["hidden"].std() < 10


def test_a_filled_model_opens_in_onnxruntime_whatever_ir_version_onnx_gave_it():
    """`helper.make_model` of the pinned onnx writes IR 14, past what the pinned onnxruntime reads:
    the filled model ("any ONNX runtime can run") declares the IR version its opsets need."""
    import onnxruntime as ort

    from einsat.ir.onnx.weights import fill_random_weights
    m = model()
    m.ir_version = onnx.IR_VERSION  # as helper.make_model writes it by default
    filled = fill_random_weights(m, seed=0)
    assert filled.ir_version == 10  # opset 17 needs IR 8; einsat writes 10 at least, as its exports
    onnx.checker.check_model(filled)
    session = ort.InferenceSession(filled.SerializeToString(), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].name == "x"
