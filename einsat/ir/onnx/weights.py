"""Seeded random weights for ONNX models that ship without real ones.

Two kinds of models carry no usable weights: the ONNX model zoo's "light" test models, whose
weights are `ConstantOfShape` nodes filling every tensor with one value, and models committed
with their weights stripped (`scripts/export_torch_models.py`), where each weight is a graph
input listed in the metadata entry `STRIPPED_KEY`. `fill_random_weights` gives both random
values, so that comparing two runtimes on them means something.

The values follow how frameworks initialise a fresh model, by the role each weight plays where
it is used (found by following it through Transpose, Reshape, Unsqueeze, Cast, ... to the op
that consumes it), so that activations stay of order one through deep networks, a classifier's
softmax does not saturate, and a model's outputs depend on its inputs:

  conv kernel          U(±sqrt(6 / fan_in))    He/Kaiming uniform, as torchvision's CNNs (ReLU gain)
  matmul/gemm matrix   U(±1 / sqrt(fan_in))    torch.nn.Linear's default; fan_in = the summed axis
  bias (conv, gemm,    U(±1 / sqrt(fan_in))    torch's bias bound, fan_in of the node's weight
    added rank <= 1)                           (of the bias's own length for an Add)
  embedding (gathered  N(0, 1)                 torch.nn.Embedding's default
    or added, rank >= 2)
  norm scale, Mul/Div  U(0.9, 1.1)             ~1 (frameworks start at exactly 1; a spread keeps
    operand, variance                          every channel distinct and variances valid)
  norm shift, mean     U(±0.1)                 small
  anything else        rank >= 2 as a conv kernel (fan_in = prod(shape[1:])), rank <= 1 U(0.9, 1.1)

Each tensor's values depend only on (seed, its name, its role). Integer tensors (shapes,
indices, position ids) and scalars (epsilons, mask constants) are never replaced.
"""

from __future__ import annotations

import json
import zlib
from math import prod

import numpy as np
import onnx
from onnx import helper, numpy_helper

from einsat.ir.types import is_float

STRIPPED_KEY = "einsat.stripped_weights"


# how each role is drawn: (distribution, bound or (low, high) from fan_in)
ROLES = ("kernel", "matrix", "bias", "embedding", "scale", "shift")
_PASS_THROUGH = {"Transpose", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Cast", "CastLike", "Identity",
                 "Expand"}
_METADATA = {"Shape", "Size"}  # consumers that read no value
_NORMS = {"BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization",
          "RMSNormalization", "SkipLayerNormalization"}


def random_weight(name: str, shape: tuple[int, ...], dtype, seed: int = 0, role: str | None = None,
                  fan_in: int | None = None) -> np.ndarray:
    """The seeded random value `fill_random_weights` gives the weight `name` in `role` (one of
    `ROLES`; None: guessed from the rank, see the module docstring), with `fan_in` the number of
    products each output of its consumer sums (default prod(shape[1:]))."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    if role is None:
        role = "kernel" if len(shape) >= 2 else "scale"
    if role not in ROLES:
        raise ValueError(f"weight {name!r}: unknown role {role!r}; one of {ROLES}")
    fan_in = max(int(fan_in if fan_in is not None else prod(shape[1:])), 1)
    if role == "kernel":
        bound = np.sqrt(6.0 / fan_in)
        value = rng.uniform(-bound, bound, shape)
    elif role in ("matrix", "bias"):
        bound = 1.0 / np.sqrt(fan_in)
        value = rng.uniform(-bound, bound, shape)
    elif role == "embedding":
        value = rng.standard_normal(shape)
    elif role == "scale":
        value = rng.uniform(0.9, 1.1, shape)
    else:  # shift
        value = rng.uniform(-0.1, 0.1, shape)
    return value.astype(np.float32).astype(dtype, copy=False)


def weight_roles(graph: onnx.GraphProto, shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[str, int | None]]:
    """(role, fan_in) of each weight in `shapes` ({name: shape}), from the op that consumes it
    (see the module docstring); fan_in None where the role has none or it cannot be told."""
    uses: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for k, name in enumerate(node.input):
            uses.setdefault(name, []).append((node, k))
    return {name: _role(name, shape, uses, shapes) for name, shape in shapes.items()}


def _perm(node: onnx.NodeProto, rank: int) -> list[int]:
    for a in node.attribute:
        if a.name == "perm":
            return list(a.ints)
    return list(range(rank))[::-1]


def _role(name, shape, uses, shapes) -> tuple[str, int | None]:
    layout: tuple[int, ...] | None = tuple(shape)  # the weight's shape as its consumer sees it
    for _ in range(8):  # through pass-through ops to the consumer that computes with it
        consumers = [(n, k) for n, k in uses.get(name, ()) if n.op_type not in _METADATA]
        if not consumers:
            break
        node, k = consumers[0]
        if node.op_type in _PASS_THROUGH and k == 0:
            if node.op_type == "Transpose" and layout is not None:
                layout = tuple(layout[i] for i in _perm(node, len(layout)))
            elif node.op_type not in ("Cast", "CastLike", "Identity"):
                layout = None
            name = node.output[0]
            continue
        return _consumer_role(node, k, layout, shape, shapes)
    return ("kernel", None) if len(shape) >= 2 else ("scale", None)


def _attr(node: onnx.NodeProto, key: str, default: int = 0) -> int:
    return next((a.i for a in node.attribute if a.name == key), default)


def _consumer_role(node, k, layout, shape, shapes) -> tuple[str, int | None]:
    op = node.op_type
    summed = None
    if op in ("Conv", "ConvTranspose"):
        if k == 1:
            return "kernel", None if layout is None else prod(layout[1:])
        weight = shapes.get(node.input[1]) if len(node.input) > 1 else None
        return "bias", prod(weight[1:]) if weight else None
    if op in ("MatMul", "Gemm") and layout is not None and len(layout) >= 2:
        if op == "MatMul":
            summed = layout[-1] if k == 0 else layout[-2]
        elif k == 0:
            summed = layout[0] if _attr(node, "transA") else layout[1]
        elif k == 1:
            summed = layout[1] if _attr(node, "transB") else layout[0]
    if op in ("MatMul", "Gemm") and k < 2:
        return "matrix", summed
    if op == "Gemm":  # its bias C
        b = shapes.get(node.input[1])
        return "bias", None if b is None else (b[1] if _attr(node, "transB") else b[0])
    if op == "Gather" and k == 0:
        return "embedding", None
    if op in _NORMS:
        if op == "BatchNormalization" and k == 4:
            return "scale", None   # a variance: positive, ~1
        return ("scale", None) if k == 1 else ("shift", None)
    if op in ("Add", "Sub"):
        return ("bias", shape[-1] if shape else None) if len(shape) <= 1 or prod(shape) == shape[-1] \
            else ("embedding", None)
    if op in ("Mul", "Div"):
        return "scale", None
    if op == "Concat" and len(shape) >= 2:
        return "embedding", None
    return ("kernel", None) if len(shape) >= 2 else ("scale", None)


def stripped_weights(model: onnx.ModelProto) -> list[str]:
    """Names of the graph inputs that stand for stripped weights (from the model's metadata)."""
    for prop in model.metadata_props:
        if prop.key == STRIPPED_KEY:
            return list(json.loads(prop.value))
    return []


def _replaceable(shape, elem_type: int) -> bool:
    dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    return is_float(dtype) and prod(shape) > 1


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

    roles = weight_roles(g, {n: shape for n, (_, shape) in types.items()})
    for n, (elem, shape) in types.items():
        role, fan_in = roles[n]
        values[n] = random_weight(n, shape, helper.tensor_dtype_to_np_dtype(elem), seed, role, fan_in)
        values[n].setflags(write=False)  # made here, read only: the import keeps it without a copy
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
    fill_weights="random", seed=seed)` imports, as a model any ONNX runtime can run (its IR
    version lowered to what its opsets need, `onnx.export.ir_version`, where it declares more)."""
    m, values = random_weights(model, seed)
    out = attach_weights(m, values)
    from einsat.ir.onnx.export import ir_version  # onnx's default IR version may be past onnxruntime's
    out.ir_version = min(out.ir_version, ir_version(out.opset_import))
    return out


def _replace(field, items) -> None:
    items = list(items)
    del field[:]
    field.extend(items)
