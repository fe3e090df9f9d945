"""Every workload builds, runs on NumPy at batch 1, exports valid ONNX and runs on the
onnxruntime backend with equal outputs; the single-operator cases have the papers' exact shapes."""

import numpy as np
import onnx
import pytest

import einsat
from benchmarks.workloads import CPU_SIZES, WORKLOADS, build
from einsat.runtime import random_inputs
from tests.benchmarks.common import SMALL, assert_close_scaled


def test_every_workload_has_a_test_size_and_a_documented_source():
    assert set(SMALL) == set(WORKLOADS)
    for name, w in WORKLOADS.items():
        assert w.description and w.source, name
        assert "batch" in w.defaults or "batch" in w.builder.__code__.co_varnames, name
    assert set(CPU_SIZES) <= set(WORKLOADS)


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_workload_runs_on_numpy_and_onnxruntime_alike(name, tmp_path):
    g = build(name, **SMALL[name])
    x = random_inputs(g)
    want = einsat.run(g, x)
    for o in g.outputs:
        assert want[o].shape == g.types[o].shape
        assert np.isfinite(want[o]).all(), f"{name}: output {o} is not finite"
        assert np.abs(want[o]).max() > 0, f"{name}: output {o} is all zeros"
    path = tmp_path / f"{name}.onnx"
    einsat.save_onnx(g, path)
    onnx.checker.check_model(str(path))
    got = einsat.run(g, x, backend="onnxruntime")
    for o in g.outputs:
        assert_close_scaled(got[o], want[o], what=f"{name}/{o}")


def test_same_arguments_give_the_same_graph_and_batch_is_a_parameter():
    a, b = build("squeezenet", image=32), build("squeezenet", image=32)
    assert [n.op for n in a.nodes] == [n.op for n in b.nodes]
    assert all(np.array_equal(a.weights[k], b.weights[k]) for k in a.weights)
    four = build("squeezenet", image=32, batch=4)
    assert four.types["x"].shape == (4, 3, 32, 32)
    assert four.types[four.outputs[0]].shape == (4, 1000)


def conv_nodes(g):
    return [n for n in g.nodes if n.op in (einsat.Op.CONV, einsat.Op.CONV_TRANSPOSE)]


def io_shapes(g):
    node = conv_nodes(g)[0] if conv_nodes(g) else g.nodes[0]
    ins, outs = g.node_types(node)
    return [t.shape for t in ins], [t.shape for t in outs]


@pytest.mark.parametrize("name,inputs,output", [
    # PET Table 3: input, weight -> output
    ("pet_conv", [(1, 48, 38, 38), (64, 48, 5, 5)], (1, 64, 38, 38)),
    ("pet_dilated_conv", [(1, 512, 14, 14), (256, 512, 3, 3)], (1, 256, 14, 14)),
    # EinNet Table 3
    ("einnet_conv3x3", [(1, 512, 7, 7), (512, 512, 3, 3)], (1, 512, 7, 7)),
    ("einnet_conv_transpose", [(16, 448, 2, 2), (448, 256, 4, 4)], (16, 256, 4, 4)),
    ("einnet_conv5x5", [(16, 32, 224, 224), (1, 32, 5, 5)], (16, 1, 224, 224)),
    ("einnet_g2bmm", [(8, 10000, 64), (8, 10000, 64)], (8, 10000, 2001)),
])
def test_single_operator_cases_have_the_papers_shapes(name, inputs, output):
    g = build(name)
    ins, outs = io_shapes(g)
    assert ins == inputs and outs == [output]


def test_pet_multi_operator_cases_have_the_papers_shapes():
    g = build("pet_group_conv")
    assert [io_shapes_of(g, n) for n in conv_nodes(g)] == [
        ([(1, 768, 18, 18), (192, 768, 1, 1)], (1, 192, 18, 18)),
        ([(1, 768, 18, 18), (160, 768, 1, 1)], (1, 160, 18, 18))]
    g = build("pet_batch_matmul")
    assert [io_shapes_of(g, n) for n in g.nodes] == [([(512, 768), (768, 768)], (512, 768))] * 3
    assert len({n.inputs[0] for n in g.nodes}) == 1  # one input shared by the three products


def io_shapes_of(g, node):
    ins, outs = g.node_types(node)
    return [t.shape for t in ins], outs[0].shape


def test_model_workloads_have_the_papers_configurations():
    csr = build("csrnet")
    assert csr.types["x"].shape == (1, 512, 14, 14)
    convs = conv_nodes(csr)
    assert [g.shape[0] for g in (csr.types[n.inputs[1]] for n in convs)] == [512, 512, 512, 256, 128, 64]
    assert all(n.attrs["dilation"] == (2, 2) and n.attrs["padding"] == (2, 2, 2, 2) for n in convs)
    lf = build("longformer", seq=64, width=8)  # the defaults' attention, at a short length
    band = next(n for n in lf.nodes if n.op is einsat.Op.G2BMM)
    assert band.attrs["dilation"] == 4 and lf.types[band.inputs[0]].shape == (8, 64, 64)
    assert WORKLOADS["longformer"].defaults == {"batch": 1, "seq": 10000, "hidden": 512, "heads": 8,
                                                "width": 1000, "dilation": 4}
    assert WORKLOADS["bert"].defaults == {"batch": 1, "seq": 512, "hidden": 768, "heads": 12, "layers": 12}
    assert WORKLOADS["bert_tensat"].defaults == {"seq": 64, "hidden": 1024, "heads": 16, "layers": 8}
    gan = build("infogan")
    assert gan.types["z"].shape == (1, 228, 1, 1) and gan.types[gan.outputs[0]].shape == (1, 3, 32, 32)
    gcn = build("gcn", image=64)
    kernels = {gcn.types[n.inputs[1]].shape[2:] for n in conv_nodes(gcn)}
    assert {(11, 1), (1, 11)} <= kernels  # the separable large-kernel convs
    rnn = build("nasrnn")
    assert len(rnn.inputs) == 5 and rnn.types["x0"].shape == (1, 512)
    assert sum(n.op is einsat.Op.MATMUL for n in rnn.nodes) == 5 * 16


def test_unknown_workload_is_named_in_the_error():
    with pytest.raises(KeyError, match="resnet19.*resnet18"):
        build("resnet19")
