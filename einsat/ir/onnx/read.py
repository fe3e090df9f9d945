"""Reading an ONNX model and preparing it for import.

`read_model` turns a path, bytes or ModelProto into a ModelProto and a label naming it in error
messages; every failure (missing file, truncated or corrupt protobuf) is an `OnnxError` naming
the file. `prepare` then makes the model importable: nodes in topological order (a cycle is a
`GraphError` naming its nodes), the ONNX checker, local functions inlined, the default opset
brought into 13-25 with `onnx.version_converter` (refused when that changes the model's inputs
or outputs), static input shapes (symbolic dims must be fixed with `input_shapes=`: one error lists them all,
`shapes_for_dims` makes `input_shapes` from one size per symbol), ONNX shape
inference, and element types einsat computes with (`DTYPES`). Inputs and outputs must be tensors;
each refusal is an `OnnxError` naming the value and its ONNX type (`type_text`). Below: reading
ONNX values (attributes as Python values, static tensor types), one node's types inferred alone,
and the nodes the graph's outputs depend on.
"""

from __future__ import annotations

import heapq
import os
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper, numpy_helper, shape_inference, version_converter

from einsat.errors import GraphError, OnnxError
from einsat.ir.types import TensorType

# Opsets 22-25 changed no schema einsat maps beyond the element types it takes (bfloat16 Conv and the
# like from 22, the 4-bit and float8 types it refuses from 23), `round_mode` of Cast and CastLike (for
# float8e8m0 only, refused), and QuantizeLinear/DequantizeLinear's attributes (kept opaque); their new
# ops are kept opaque and run (Attention, RotaryEmbedding, Swish, TensorScatter), but RMSNormalization, read as rmsnorm.
# Checked against onnx's schemas by tests/ir/test_onnx_opsets.py. Newer models are converted to 25.
MIN_OPSET, MAX_OPSET = 13, 25
DEFAULT_DOMAINS = ("", "ai.onnx")
_T = onnx.TensorProto
# the element types einsat computes with; strings, complex numbers, float8/float4 and int4/int2 are refused
DTYPES = frozenset({_T.BOOL, _T.INT8, _T.INT16, _T.INT32, _T.INT64, _T.UINT8, _T.UINT16, _T.UINT32, _T.UINT64,
                    _T.FLOAT16, _T.BFLOAT16, _T.FLOAT, _T.DOUBLE})


def read_model(src) -> tuple[onnx.ModelProto, str]:
    """(model, label) from a path, bytes or a ModelProto."""
    if isinstance(src, onnx.ModelProto):
        return src, f"model {src.graph.name or '<unnamed>'!r}"
    path = None
    if isinstance(src, (bytes, bytearray, memoryview)):
        data, label = bytes(src), "ONNX bytes"
    elif isinstance(src, (str, os.PathLike)):
        path = Path(src)
        label = str(path)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise OnnxError(f"{label}: no such file") from None
        except IsADirectoryError:
            raise OnnxError(f"{label}: is a directory, not an ONNX file{_onnx_files_in(path)}") from None
        except OSError as e:
            raise OnnxError(f"{label}: cannot read the file: {e.strerror or e}") from None
    else:
        raise OnnxError(f"load_onnx takes a path, bytes or an onnx.ModelProto, not {type(src).__name__}")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        raise OnnxError(f"{label}: not a readable ONNX model (truncated or corrupt protobuf: {e})") from None
    if not model.HasField("graph") or not model.opset_import:
        raise OnnxError(f"{label}: not an ONNX model (no graph or no opset; empty or truncated file?)")
    if path is not None and _has_external_data(model):
        from onnx.external_data_helper import load_external_data_for_model
        try:
            load_external_data_for_model(model, str(path.parent))
        except (OSError, ValueError, onnx.checker.ValidationError) as e:  # onnx's path checks raise the latter
            missing = sorted({_location(t) for t in model.graph.initializer
                              if t.data_location == onnx.TensorProto.EXTERNAL
                              and not (path.parent / _location(t)).is_file()})
            if missing:
                raise OnnxError(f"{label}: its weights are stored outside it, in {', '.join(missing)}, and "
                                f"{'that file is' if len(missing) == 1 else 'those files are'} not in "
                                f"{path.resolve().parent} (keep the .onnx file and its data files together)") from None
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise OnnxError(f"{label}: cannot read the model's external weight data: {reason}") from None
    return model, label


def _location(tensor: onnx.TensorProto) -> str:
    return next((e.value for e in tensor.external_data if e.key == "location"), "?")


def _has_external_data(model: onnx.ModelProto) -> bool:
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)


def _onnx_files_in(directory: Path) -> str:
    found = sorted(p.name for p in directory.glob("*.onnx"))
    if not found:
        return ""
    return f" (it holds {', '.join(found[:5])}{', ...' if len(found) > 5 else ''})"


def default_opset(model: onnx.ModelProto) -> int:
    return max((o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS), default=0)


def prepare(model: onnx.ModelProto, label: str, input_shapes=None, weights=(),
            symbolic: bool = False) -> onnx.ModelProto:
    """A copy of `model` ready for import (see the module docstring). `weights` names the graph
    inputs that stand for weights held outside the proto (`onnx.weights.detach_weights`).
    `symbolic=True` keeps the inputs' symbolic dims (`dim_param`s) that `input_shapes` leaves
    unpinned, instead of refusing them (docs/dynamic-shapes.md)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    sort_nodes(m.graph, label)
    try:
        onnx.checker.check_model(m)
    except onnx.checker.ValidationError as e:
        raise OnnxError(f"{label}: not a valid ONNX model: {str(e).strip().splitlines()[0]}") from None
    if m.functions:
        from onnx import inliner
        m = inliner.inline_local_functions(m)
    version = default_opset(m)
    if not MIN_OPSET <= version <= MAX_OPSET:
        target = MIN_OPSET if version < MIN_OPSET else MAX_OPSET
        before = _interface(m.graph)
        try:
            m = version_converter.convert_version(m, target)
        except Exception as e:  # the converter raises bare RuntimeErrors and more
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise OnnxError(f"{label}: the model uses opset {version}; einsat reads opsets "
                            f"{MIN_OPSET}-{MAX_OPSET} and onnx.version_converter could not convert it "
                            f"to {target}: {reason}") from None
        changed = [f"{n!r} {t} -> {_interface(m.graph).get(n)}" for n, t in before.items()
                   if _interface(m.graph).get(n) != t]
        if changed:
            raise OnnxError(f"{label}: the model uses opset {version}; converted to {target} by "
                            f"onnx.version_converter, its inputs and outputs change: {', '.join(changed)}")
    fix_input_shapes(m.graph, label, input_shapes or {}, set(weights), symbolic)
    for o in m.graph.output:
        if not o.type.HasField("tensor_type"):
            raise OnnxError(f"{label}: output {o.name!r} has type {type_text(o.type)}; "
                            f"einsat computes tensor outputs only")
    try:
        m = shape_inference.infer_shapes(m, data_prop=True)
    except Exception as e:  # not raised in non-strict mode but for a broken model
        raise OnnxError(f"{label}: ONNX shape inference failed: {str(e).strip().splitlines()[0]}") from None
    check_dtypes(m.graph, label)
    return m


def check_dtypes(graph: onnx.GraphProto, label: str) -> None:
    """An OnnxError naming the first value whose element type einsat does not compute with."""
    values = [(vi.name, vi.type.tensor_type.elem_type, vi.type) for vi in (*graph.input, *graph.output,
              *graph.value_info) if vi.type.HasField("tensor_type")]
    values += [(t.name, t.data_type, None) for t in graph.initializer]
    for name, elem, tp in values:
        if elem and elem not in DTYPES:
            shown = type_text(tp) if tp is not None else f"tensor({_T.DataType.Name(elem).lower()})"
            raise OnnxError(f"{label}: {name!r} has type {shown}; einsat computes tensors of bools, integers "
                            f"and 16/32/64-bit floating-point numbers only")


def _interface(graph: onnx.GraphProto) -> dict[str, str]:
    """The graph's inputs and outputs as text: name -> type and dims ('?' for a symbolic dim)."""
    return {vi.name: f"{type_text(vi.type)}{[d if isinstance(d, int) else '?' for d in _dims(vi)]}"
            for vi in (*graph.input, *graph.output)}


def _dims(vi: onnx.ValueInfoProto) -> list:
    tt = vi.type.tensor_type
    return [d.dim_value if d.HasField("dim_value") else d.dim_param or "?" for d in tt.shape.dim]


class SymbolicShapesError(OnnxError):
    """Inputs with symbolic dims that nothing pinned: `inputs` maps each to its dims (ints and
    `SymDim`s, every one listed at once), `symbols` is every symbol they use."""

    def __init__(self, message: str, inputs: dict[str, list], symbols: list[str]):
        super().__init__(message)
        self.inputs, self.symbols = inputs, symbols


def parse_dim(text: str):
    """An ONNX `dim_param` as a dimension: 'batch' -> sym('batch'), 'past_sequence + 1' ->
    sym('past_sequence') + 1 (names, integers, +, -, *, // and parentheses); any other text is
    one symbol of that name."""
    import ast

    from einsat.ir.dims import floordiv, sym

    def value(n):
        if isinstance(n, ast.Name):
            return sym(n.id)
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return n.value
        if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
            a, b = value(n.left), value(n.right)
            if isinstance(n.op, ast.Add):
                return a + b
            if isinstance(n.op, ast.Sub):
                return a - b
            if isinstance(n.op, ast.Mult):
                return a * b
            if isinstance(b, int) and b >= 1:
                return floordiv(a, b)
        raise ValueError(text)

    try:
        return value(ast.parse(text.strip(), mode="eval").body)
    except (SyntaxError, ValueError, RecursionError):
        return sym(text)


def input_dims(graph: onnx.GraphProto, weights: set[str] = frozenset()) -> dict[str, list | None]:
    """Each real input's dims as einsat reads them: ints, `SymDim`s for `dim_param`s (and for
    unnamed unknown dims, a symbol '<input>.<axis>'), or None for an input with no shape."""
    weights = set(weights) | {i.name for i in graph.initializer}
    out: dict[str, list | None] = {}
    for vi in graph.input:
        if vi.name in weights or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            out[vi.name] = None
            continue
        from einsat.ir.dims import sym
        out[vi.name] = [d.dim_value if d.HasField("dim_value") else
                        parse_dim(d.dim_param) if d.dim_param else sym(f"{vi.name}.{k}")
                        for k, d in enumerate(tt.shape.dim)]
    return out


def shapes_for_dims(model, dims: dict[str, int], weights: set[str] = frozenset()) -> dict[str, tuple[int, ...]]:
    """`input_shapes` for a model (a ModelProto or GraphProto) from one size per symbol: every
    input whose dims use only the symbols named in `dims` gets its static shape (`--dim batch=1`
    pins `batch` in every input at once). A name that is no symbol of the model is an OnnxError
    listing the model's symbols."""
    from einsat.ir.dims import evaluate, symbols_of
    graph = model.graph if isinstance(model, onnx.ModelProto) else model
    found = {n: d for n, d in input_dims(graph, weights).items() if d is not None}
    symbols = sorted(set().union(*(symbols_of(x) for d in found.values() for x in d)))
    unknown = sorted(set(dims) - set(symbols))
    if unknown:
        raise OnnxError(f"{graph.name or 'the model'}: {unknown} named by --dim / dims is no symbolic dim of the "
                        f"model's inputs; its symbols are {symbols or 'none (every input is static)'}")
    shapes = {}
    for name, d in found.items():
        used = set().union(*(symbols_of(x) for x in d))
        if used and used <= set(dims):
            shapes[name] = tuple(evaluate(x, dims) for x in d)
    return shapes


def fix_input_shapes(graph: onnx.GraphProto, label: str, input_shapes, weights: set[str],
                     symbolic: bool = False) -> None:
    """Give every real input a static shape: from `input_shapes` or the model; else one
    `SymbolicShapesError` listing every input with symbolic dims and every symbol (with
    `symbolic=True`, those keep their symbolic dims; an input with no shape is still refused)."""
    weights = weights | {i.name for i in graph.initializer}
    real = {i.name: i for i in graph.input if i.name not in weights}
    unknown = set(input_shapes) - set(real)
    if unknown:
        raise OnnxError(f"{label}: input_shapes names {sorted(unknown)}, but the model's inputs are {sorted(real)}")
    keep_symbols, symbolic = symbolic, {}
    for name, vi in real.items():
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise OnnxError(f"{label}: input {name!r} has type {type_text(vi.type)}; einsat takes tensor inputs only")
        if name in input_shapes:
            shape = [int(d) for d in input_shapes[name]]
            _check_pinned_shape(label, name, _dims(vi) if tt.HasField("shape") else None, shape)
            tt.shape.Clear()
            for d in shape:
                tt.shape.dim.add().dim_value = d
            continue
        if not tt.HasField("shape"):
            raise OnnxError(f"{label}: input {name!r} has no shape; einsat needs static shapes: give it one with "
                            f"--input-shape {name}=D1,D2,... on the command line, or input_shapes={{{name!r}: (...)}} "
                            f"in Python")
        if any(not isinstance(d, int) for d in _dims(vi)):
            symbolic[name] = None
    if symbolic and not keep_symbols:
        dims = input_dims(graph, weights)  # once, for every symbolic input
        raise _symbolic_error(label, {name: dims[name] for name in symbolic})


def _symbolic_error(label: str, symbolic: dict[str, list]) -> SymbolicShapesError:
    from einsat.ir.dims import symbols_of
    symbols = sorted(set().union(*(symbols_of(x) for d in symbolic.values() for x in d)))
    listed = "; ".join(f"{n!r} [{', '.join(repr(str(x)) if not isinstance(x, int) else str(x) for x in d)}]"
                       for n, d in symbolic.items())
    pins = ", ".join(f"{n!r}: (...)" for n in symbolic)
    many = len(symbolic) > 1
    return SymbolicShapesError(
        f"{label}: einsat needs static shapes, and {len(symbolic)} input{'s have' if many else ' has'} symbolic "
        f"dims: {listed}. Give each symbol a size once for every input with "
        f"{' '.join(f'--dim {s}=N' for s in symbols)} on the command line, or fix the inputs' dims with "
        f"{' '.join(f'--input-shape {n}=D1,D2,...' for n in symbolic)}, input_shapes={{{pins}}} in Python "
        f"(einsat.ir.onnx.read.shapes_for_dims makes them from one size per symbol)", symbolic, symbols)


def _check_pinned_shape(label: str, name: str, declared: list | None, shape: list[int]) -> None:
    """`input_shapes` pins an input's symbolic dims, never its rank, and never the shape of an input
    the model declares wholly static (its Reshape targets and weights were written for that size).
    An input with a symbolic dim may be given other fixed dims too: a convolutional export declares
    ['batch', 3, 224, 224] and runs at any image size."""
    if any(d < 0 for d in shape):
        raise OnnxError(f"{label}: input_shapes gives input {name!r} the shape {shape}; dims must be >= 0")
    if declared is None:
        return
    if len(declared) != len(shape):
        raise OnnxError(f"{label}: input {name!r} has shape {declared} (rank {len(declared)}); input_shapes "
                        f"gives it {shape} (rank {len(shape)})")
    fixed = [k for k, (d, s) in enumerate(zip(declared, shape)) if d != s]
    if fixed and all(isinstance(d, int) for d in declared):
        raise OnnxError(f"{label}: input {name!r} already has the static shape {declared}; input_shapes gives "
                        f"it {shape}, which changes the fixed dim{'s' if len(fixed) > 1 else ''} {fixed}: only "
                        f"symbolic dims can be pinned (leave a static input out of input_shapes / --input-shape)")


def sort_nodes(graph: onnx.GraphProto, label: str) -> None:
    """Put the nodes in topological order (stable); a cycle is a GraphError naming its nodes."""
    nodes = list(graph.node)
    producer = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    deps = [{producer[i] for i in n.input if i in producer} for n in nodes]
    users: dict[int, list[int]] = {}
    for k, ds in enumerate(deps):
        for d in ds:
            users.setdefault(d, []).append(k)
    missing = [len(ds) for ds in deps]
    ready = [k for k, c in enumerate(missing) if c == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        k = heapq.heappop(ready)
        order.append(k)
        for u in users.get(k, ()):
            missing[u] -= 1
            if missing[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        cycle = _cycle([k for k, c in enumerate(missing) if c > 0], deps, missing)
        names = " -> ".join(f"{_node_label(nodes[k])}" for k in cycle)
        raise GraphError(f"{label}: the graph has a cycle: {names}")
    if order != list(range(len(nodes))):
        del graph.node[:]
        graph.node.extend(nodes[k] for k in order)


def _cycle(stuck: list[int], deps, missing) -> list[int]:
    k, seen, path = stuck[0], {}, []
    while k not in seen:
        seen[k] = len(path)
        path.append(k)
        k = next(d for d in deps[k] if missing[d] > 0)
    cycle = path[seen[k]:]
    return list(reversed(cycle)) + [cycle[-1]]


def _node_label(node: onnx.NodeProto) -> str:
    return f"{node.name or (node.output[0] if node.output else '?')!r} ({node.op_type})"


def live_nodes(g: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes some graph output depends on, in order."""
    nodes = list(g.node)
    needed = {o.name for o in g.output}
    live = []
    for k in range(len(nodes) - 1, -1, -1):
        if any(o in needed for o in nodes[k].output):
            live.append(k)
            needed.update(i for i in nodes[k].input if i)
    return [nodes[k] for k in reversed(live)]


def outer_names(node: onnx.NodeProto) -> set[str]:
    """The names a node's subgraphs (If branches, Loop bodies, ...) read from the enclosing graph."""
    names: set[str] = set()
    for a in node.attribute:
        for g in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
            local = {i.name for i in (*g.input, *g.initializer)} | {o for n in g.node for o in n.output}
            for n in g.node:
                names.update(i for i in (*n.input, *outer_names(n)) if i and i not in local)
            names.update(o.name for o in g.output if o.name not in local)
    return names


def attr_value(a: onnx.AttributeProto):
    v = helper.get_attribute_value(a)
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, list):
        return tuple(x.decode("utf-8", errors="replace") if isinstance(x, bytes)
                     else numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x for x in v)
    return v


def static_type(vi: onnx.ValueInfoProto) -> TensorType | None:
    if not vi.type.HasField("tensor_type"):
        return None
    tt = vi.type.tensor_type
    if not tt.HasField("shape") or not tt.elem_type or any(not d.HasField("dim_value") for d in tt.shape.dim):
        return None
    return TensorType([d.dim_value for d in tt.shape.dim], helper.tensor_dtype_to_np_dtype(tt.elem_type))


def infer_node_types(onode: onnx.NodeProto, types: dict, constants: dict, opsets: dict) -> dict[str, TensorType]:
    """Static output types of one node, by ONNX shape inference on a model holding just that node:
    its inputs typed as einsat knows them (`types`), its small constant inputs given as values.
    In the whole model ONNX may have lost a shape on the way (a dim it could not compute from
    data); einsat, which folds the shape arithmetic, has them. Empty when inference fails."""
    inputs, inits = [], []
    for name in dict.fromkeys(i for i in onode.input if i):
        value = constants.get(name)
        if value is not None and value.size <= 4096:
            inits.append(numpy_helper.from_array(np.asarray(value), name))
        else:
            t = types[name]
            shape = [d if isinstance(d, int) else str(d) for d in t.shape]  # a symbolic dim as a dim_param
            inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(t.dtype), shape))
    outputs = [onnx.ValueInfoProto(name=o) for o in onode.output if o]
    graph = helper.make_graph([onode], "node", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    try:
        inferred = shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # an op ONNX cannot infer alone (one reading an outer scope)
        return {}
    return {vi.name: t for vi in (*inferred.graph.output, *inferred.graph.value_info) if (t := static_type(vi))}


def type_text(tp: onnx.TypeProto) -> str:
    """An ONNX type as text: 'tensor(float)', 'sequence(tensor(int64))', 'optional(...)', ..."""
    kind = tp.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        elem = getattr(tp, kind).elem_type
        name = onnx.TensorProto.DataType.Name(elem).lower() if elem else "?"
        return f"{kind[:-5]}({name})"
    if kind in ("sequence_type", "optional_type"):
        return f"{kind[:-5]}({type_text(getattr(tp, kind).elem_type)})"
    if kind == "map_type":
        key = onnx.TensorProto.DataType.Name(tp.map_type.key_type).lower()
        return f"map({key}, {type_text(tp.map_type.value_type)})"
    return "value of unknown type"


def symbolic_type(vi: onnx.ValueInfoProto, fresh=None) -> TensorType | None:
    """A value's type with its `dim_param`s as symbols (`parse_dim`); a dim with neither value nor
    name becomes `fresh(name, axis)` (a new symbol: a size einsat cannot know before running),
    or makes the type unknown (None) when `fresh` is not given."""
    if not vi.type.HasField("tensor_type"):
        return None
    tt = vi.type.tensor_type
    if not tt.HasField("shape") or not tt.elem_type:
        return None
    dims = []
    for k, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value"):
            dims.append(d.dim_value)
        elif d.dim_param:
            dims.append(parse_dim(d.dim_param))
        elif fresh is not None:
            dims.append(fresh(vi.name, k))
        else:
            return None
    return TensorType(dims, helper.tensor_dtype_to_np_dtype(tt.elem_type))


def value_type(vi: onnx.ValueInfoProto, label: str, symbolic: bool = False) -> TensorType:
    if symbolic:
        from einsat.ir.dims import sym
        t = symbolic_type(vi, lambda name, k: sym(f"{name}.{k}"))  # as `input_dims` names it
    else:
        t = static_type(vi)
    if t is None:
        raise OnnxError(f"{label}: input {vi.name!r} has no static tensor type")
    return t
