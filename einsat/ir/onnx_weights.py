"""Seeded random weights for ONNX models that ship without real ones.

Two kinds of models carry no usable weights: the ONNX model zoo's "light" test models, whose
weights are `ConstantOfShape` nodes filling every tensor with one value, and models committed
with their weights stripped (`scripts/export_torch_models.py`), where each weight is a graph
input listed in the metadata entry `STRIPPED_KEY`. `fill_random_weights` gives both random
values, so that comparing two runtimes on them means something.

The values keep activations of order one through deep networks: a tensor of rank >= 2 is a
weight matrix or kernel, drawn N(0, 2 / fan_in) (He), fan_in = prod(shape[1:]); a tensor of
rank <= 1 is a bias, scale, mean or variance, drawn U(0.5, 1.5) (positive, so variances are
valid). Each tensor's values depend only on (seed, its name). Integer tensors (shapes,
indices, position ids) and scalars (epsilons, mask constants) are never replaced.
"""

from __future__ import annotations

import json
import zlib
from math import prod

import numpy as np
import onnx
from onnx import helper, numpy_helper

STRIPPED_KEY = "einsat.stripped_weights"


def random_weight(name: str, shape: tuple[int, ...], dtype, seed: int = 0) -> np.ndarray:
    """The seeded random value `fill_random_weights` gives the weight `name`."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    if len(shape) >= 2:
        fan_in = max(prod(shape[1:]), 1)
        value = rng.standard_normal(shape, dtype=np.float32) * np.float32(np.sqrt(2.0 / fan_in))
    else:
        value = rng.uniform(0.5, 1.5, shape).astype(np.float32)
    return value.astype(dtype, copy=False)


def stripped_weights(model: onnx.ModelProto) -> list[str]:
    """Names of the graph inputs that stand for stripped weights (from the model's metadata)."""
    for prop in model.metadata_props:
        if prop.key == STRIPPED_KEY:
            return list(json.loads(prop.value))
    return []


def _replaceable(shape, elem_type: int) -> bool:
    dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    return np.issubdtype(dtype, np.floating) and prod(shape) > 1


def random_weights(model: onnx.ModelProto, seed: int = 0) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Seeded random values for the model's floating-point weights of size > 1 (initializers,
    outputs of `ConstantOfShape` over a constant shape, stripped weights), and a copy of the
    model where each of them is a typed graph input (see `attach_weights`)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    values: dict[str, np.ndarray] = {}
    types: dict[str, tuple] = {}

    def take(name, shape, elem):
        values[name] = random_weight(name, shape, helper.tensor_dtype_to_np_dtype(elem), seed)
        types[name] = (elem, shape)

    kept = []
    for init in g.initializer:
        if _replaceable(init.dims, init.data_type):
            take(init.name, tuple(init.dims), init.data_type)
        else:
            kept.append(init)
    consts = {i.name: i for i in kept}
    consts.update({n.output[0]: n.attribute[0].t for n in g.node
                   if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})
    nodes = []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.domain in ("", "ai.onnx") and node.input[0] in consts:
            shape = tuple(int(d) for d in numpy_helper.to_array(consts[node.input[0]]))
            value = [a.t for a in node.attribute if a.name == "value"]
            elem = value[0].data_type if value else onnx.TensorProto.FLOAT
            if _replaceable(shape, elem):
                take(node.output[0], shape, elem)
                continue
        nodes.append(node)
    stripped = set(stripped_weights(model))
    for inp in g.input:
        if inp.name in stripped:
            tt = inp.type.tensor_type
            take(inp.name, tuple(d.dim_value for d in tt.shape.dim), tt.elem_type)

    _replace(g.node, nodes)
    _replace(g.initializer, kept)
    listed = {i.name for i in g.input}
    g.input.extend(helper.make_tensor_value_info(n, elem, list(shape))
                   for n, (elem, shape) in types.items() if n not in listed)
    _replace(out.metadata_props, [p for p in out.metadata_props if p.key != STRIPPED_KEY])
    return out, values


def attach_weights(model: onnx.ModelProto, values: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The model with the graph inputs named in `values` turned into initializers holding them
    (kept as inputs too before IR 4, where every initializer must be listed as an input)."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    if out.ir_version >= 4:
        _replace(g.input, [i for i in g.input if i.name not in values])
    g.initializer.extend(numpy_helper.from_array(np.asarray(v), n) for n, v in values.items())
    return out


def detach_weights(model: onnx.ModelProto, min_size: int = 65) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A copy of the model whose initializers of `min_size` elements or more are typed graph
    inputs instead, and their values: the ONNX passes of the import (checker, version
    converter, shape inference) serialize the model several times and never need them."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    values = {i.name: numpy_helper.to_array(i) for i in g.initializer if prod(i.dims) >= min_size}
    if not values:
        return out, values
    listed = {i.name for i in g.input}
    g.input.extend(helper.make_tensor_value_info(i.name, i.data_type, list(i.dims))
                   for i in g.initializer if i.name in values and i.name not in listed)
    _replace(g.initializer, [i for i in g.initializer if i.name not in values])
    return out, values


def fill_random_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """A copy of `model` with `random_weights` as initializers: what `load_onnx(...,
    fill_weights="random", seed=seed)` imports, as a model any ONNX runtime can run."""
    m, values = random_weights(model, seed)
    return attach_weights(m, values)


def _replace(field, items) -> None:
    items = list(items)
    del field[:]
    field.extend(items)
