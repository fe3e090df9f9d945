"""Sequence and optional values at import (einsat/ir/onnx/sequences.py), and the values refused.

Models that build and read sequences at positions known at import run, and equal onnxruntime;
a sequence or optional einsat cannot follow is an `OnnxError` naming the value and its type.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import einsat
from einsat.errors import OnnxError
from einsat.ir import Op
from tests.ir.test_onnx_import import check_against_ort, make, x

I64 = TensorProto.INT64


def const(name, value):
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, I64, [], [value]))


def test_split_to_sequence_and_sequence_at_are_slices():
    """torch's split as the exporter writes it: SplitToSequence + SequenceAt at constant positions."""
    nodes = [helper.make_node("SplitToSequence", ["a", "sizes"], ["seq"], axis=1),
             const("p0", 0), const("p2", -1),
             helper.make_node("SequenceAt", ["seq", "p0"], ["q"]),
             helper.make_node("SequenceAt", ["seq", "p2"], ["v"]),
             helper.make_node("Add", ["q", "v"], ["y"])]
    model = make(nodes, [("a", [2, 9])], [("y", [2, 3])], inits=[("sizes", np.array([3, 3, 3]))])
    g = check_against_ort(model, {"a": x(2, 9)})
    assert g.op_counts() == {"slice": 2, "add": 1}


@pytest.mark.parametrize("keepdims", [0, 1])
def test_split_to_sequence_without_sizes_cuts_ones(keepdims):
    nodes = [helper.make_node("SplitToSequence", ["a"], ["seq"], axis=0, keepdims=keepdims),
             helper.make_node("ConcatFromSequence", ["seq"], ["y"], axis=1, new_axis=1)]
    out = [3, 4, 5] if keepdims == 0 else [1, 4, 3, 5]  # pieces [3, 5] or [1, 3, 5], stacked at 1
    model = make(nodes, [("a", [4, 3, 5])], [("y", out)])
    check_against_ort(model, {"a": x(4, 3, 5)})


def test_construct_insert_erase_length_and_concat():
    nodes = [helper.make_node("SequenceConstruct", ["a", "b"], ["s1"]),
             const("p", 1),
             helper.make_node("SequenceInsert", ["s1", "c", "p"], ["s2"]),   # a, c, b
             helper.make_node("SequenceErase", ["s2"], ["s3"]),              # a, c
             helper.make_node("SequenceLength", ["s3"], ["n"]),
             helper.make_node("ConcatFromSequence", ["s3"], ["y"], axis=0),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["y", "nf"], ["z"])]
    model = make(nodes, [("a", [2, 3]), ("b", [1, 3]), ("c", [3, 3])], [("z", [5, 3])])
    g = check_against_ort(model, {"a": x(2, 3), "b": x(1, 3, seed=1), "c": x(3, 3, seed=2)})
    assert Op.OPAQUE not in {n.op for n in g.nodes}


def test_optionals_with_and_without_an_element():
    opt_type = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    nodes = [helper.make_node("Optional", ["a"], ["full"]),
             helper.make_node("Optional", [], ["empty"], type=helper.make_tensor_type_proto(TensorProto.FLOAT, [2])),
             helper.make_node("OptionalHasElement", ["full"], ["h1"]),
             helper.make_node("OptionalHasElement", ["empty"], ["h2"]),
             helper.make_node("OptionalGetElement", ["full"], ["e"]),
             helper.make_node("Xor", ["h1", "h2"], ["h"]),
             helper.make_node("Cast", ["h"], ["hf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["e", "hf"], ["y"])]
    model = make(nodes, [("a", [2])], [("y", [2])], opset=18,
                 value_info=[helper.make_value_info("full", opt_type), helper.make_value_info("empty", opt_type)])
    g = check_against_ort(model, {"a": x(2)})
    assert g.op_counts() == {"mul": 1}  # the flags folded to constants, the element aliased


def test_sequence_and_optional_inputs_and_outputs_are_refused_naming_the_type():
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, [2])
    model = make([helper.make_node("SequenceLength", ["s"], ["n"])], [], [("n", [], I64)])
    model.graph.input.append(seq)
    with pytest.raises(OnnxError, match=r"input 's' has type sequence\(tensor\(float\)\); einsat takes tensor"):
        einsat.load_onnx(model)
    model = make([helper.make_node("SequenceConstruct", ["a"], ["s"])], [("a", [2])], [])
    model.graph.output.append(seq)
    with pytest.raises(OnnxError, match=r"output 's' has type sequence\(tensor\(float\)\)"):
        einsat.load_onnx(model)


def test_a_position_computed_at_run_time_is_refused():
    nodes = [helper.make_node("SequenceConstruct", ["a", "a"], ["s"]),
             helper.make_node("SequenceAt", ["s", "i"], ["y"])]
    model = make(nodes, [("a", [2]), ("i", [], I64)], [("y", [2])])
    with pytest.raises(OnnxError, match=r"SequenceAt.*position 'i' is computed at run time"):
        einsat.load_onnx(model)


def test_a_sequence_read_by_an_op_that_cannot_follow_it_is_refused():
    nodes = [helper.make_node("SequenceConstruct", ["a"], ["s"]),
             helper.make_node("Identity", ["s"], ["t"]),
             helper.make_node("SequenceMap", ["t"], ["u"], body=helper.make_graph(
                 [helper.make_node("Relu", ["e"], ["r"])], "body",
                 [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])],
                 [helper.make_tensor_value_info("r", TensorProto.FLOAT, [2])])),
             helper.make_node("ConcatFromSequence", ["u"], ["y"], axis=0)]
    model = make(nodes, [("a", [2])], [("y", [2])], opset=18)
    with pytest.raises(OnnxError, match=r"'s' has type sequence\(tensor\(float\)\)"):
        einsat.load_onnx(model)
