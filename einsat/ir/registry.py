"""The op registry: each op is defined exactly once, as one small class.

An `OpDef` subclass carries everything about its op: attributes (with defaults and
validation), arity, shape inference, NumPy reference semantics, the ONNX mapping both ways,
FLOP and byte counts, the facts the other layers read (the flags below) and, for ops that are
tensor algebra, their expression (EinNet §3). Every other layer looks the op up here with
`opdef(op)` and keeps no table of ops of its own; `tests/ir/test_registry.py` walks the
registry and checks each op has all of them, and checks every flag against the op's behaviour.

A flag is a promise: True is checked against the NumPy reference (or, for `tensor_core`, the
GPU lowering) on drawn cases; False is always the safe answer (a pass that relies on a fact
does nothing for an op that does not promise it).

Attributes are static: shape-like ONNX inputs (Reshape's shape, Slice's starts, ...) become
attributes at import, so that the e-graph sees them as primitives.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, Sequence

import numpy as np

from einsat.errors import AttributeValueError, ShapeError
from einsat.ir.dims import SymDim, prove_eq, symbols_of
from einsat.ir.types import TensorType


class Op(enum.Enum):
    """Every op einsat knows. The value is the builder's method name (`b.conv(...)`)."""

    # element-wise arithmetic and activations
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    RELU = "relu"
    SIGMOID = "sigmoid"
    TANH = "tanh"
    ERF = "erf"
    GELU = "gelu"
    LEAKY_RELU = "leaky_relu"
    WHERE = "where"
    # linear algebra
    MATMUL = "matmul"
    BATCHMATMUL = "batchmatmul"
    GEMM = "gemm"
    EINSUM = "einsum"
    G2BMM = "g2bmm"
    GBMM = "gbmm"
    # convolution and pooling
    CONV = "conv"
    CONV_TRANSPOSE = "conv_transpose"
    AVGPOOL = "avgpool"
    MAXPOOL = "maxpool"
    GLOBAL_AVGPOOL = "global_avgpool"
    # fused kernels (conv/matmul + bias + residual + activation)
    FUSED_CONV = "fused_conv"
    FUSED_MATMUL = "fused_matmul"
    # scaled dot-product attention (softmax(q kᵀ · scale + mask) v), made by rewrites
    ATTENTION = "attention"
    # self-attention of one input's packed Q/K/V projections (onnxruntime's contrib Attention)
    PACKED_ATTENTION = "packed_attention"
    # normalization
    BATCHNORM = "batchnorm"
    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"
    SOFTMAX = "softmax"
    LRN = "lrn"
    # a residual sum and its norm, two outputs (onnxruntime's contrib Skip*LayerNormalization)
    SKIP_LAYERNORM = "skip_layernorm"
    SKIP_RMSNORM = "skip_rmsnorm"
    # rotary position embedding (ONNX RotaryEmbedding)
    ROTARY = "rotary"
    # reductions
    REDUCE_SUM = "reduce_sum"
    REDUCE_MEAN = "reduce_mean"
    CUMSUM = "cumsum"
    # layout
    TRANSPOSE = "transpose"
    RESHAPE = "reshape"
    FLATTEN = "flatten"
    SQUEEZE = "squeeze"
    UNSQUEEZE = "unsqueeze"
    EXPAND = "expand"
    CONCAT = "concat"
    SPLIT = "split"
    SLICE = "slice"
    PAD = "pad"
    GATHER = "gather"
    GATHER_ELEMENTS = "gather_elements"
    GATHER_ND = "gather_nd"
    # element-wise math, comparisons and logic (the imperative kernels' vocabulary)
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    NEG = "neg"
    ABS = "abs"
    FLOOR = "floor"
    SIN = "sin"
    COS = "cos"
    ISNAN = "isnan"
    CLIP = "clip"
    POW = "pow"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    GREATER = "greater"
    LESS = "less"
    GREATER_EQUAL = "greater_equal"
    LESS_EQUAL = "less_equal"
    EQUAL = "equal"
    LOGICAL_AND = "logical_and"
    LOGICAL_OR = "logical_or"
    LOGICAL_XOR = "logical_xor"
    LOGICAL_NOT = "logical_not"
    CAST = "cast"
    # extremal reductions
    REDUCE_MAX = "reduce_max"
    REDUCE_MIN = "reduce_min"
    ARGMAX = "argmax"
    # functionalization (TensorSSA): immutable views, structured control flow with bodies
    ACCESS = "access"
    ASSIGN = "assign"
    LOOP = "loop"
    IF = "if_"
    # sources, plumbing
    CONSTANT = "constant"
    IDENTITY = "identity"
    CORRECT = "correct"
    FUSED_CORRECT = "fused_correct"
    OPAQUE = "opaque"
    # EinNet's eOperator: a node carrying its tensor-algebra expression
    EOP = "eop"
    # a fused eOperator with several outputs (a norm that also writes the residual sum it reads)
    EOP_MULTI = "eop_multi"


REQUIRED = object()

_KINDS: dict[str, Callable[[Any], Any]] = {}


def _kind(name):
    def deco(fn):
        _KINDS[name] = fn
        return fn
    return deco


@_kind("int")
def _to_int(v):
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError("expected an int")
    return int(v)


@_kind("float")
def _to_float(v):
    if not isinstance(v, (int, float, np.integer, np.floating)) or isinstance(v, bool):
        raise TypeError("expected a number")
    # rounded to float32, as ONNX stores float attributes: round trips stay exact
    return float(np.float32(v))


@_kind("ints")
def _to_ints(v):
    """Ints; an entry may be a symbolic dim (`SymDim`) where the op's shape rule takes one (Reshape's
    and Expand's targets in a symbolic program, docs/dynamic-shapes.md)."""
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v),)
    if isinstance(v, SymDim):
        return (v,)
    return tuple(x if isinstance(x, SymDim) else _to_int(x) for x in v)


@_kind("floats")
def _to_floats(v):
    return tuple(_to_float(x) for x in v)


@_kind("str")
def _to_str(v):
    if not isinstance(v, str):
        raise TypeError("expected a string")
    return v


@_kind("bool")
def _to_bool(v):
    if not isinstance(v, (bool, np.bool_, int)):
        raise TypeError("expected a bool")
    return bool(v)


@_kind("tensor")
def _to_tensor(v):
    a = np.array(v)  # a private copy that nobody else can write
    a.setflags(write=False)
    return a


@_kind("any")
def _to_any(v):
    return v


@dataclass(frozen=True)
class Attr:
    """One attribute of an op: its kind, default (`REQUIRED` if none) and an optional check.

    `check(value) -> str | None` returns a reason when the value is invalid. A `provenance`
    attribute records how the node was made and changes nothing it computes (an eOperator's
    chain of source ops, which its ONNX export writes back): signatures, hence profiles and
    measured costs, leave it out.
    """

    kind: str
    default: Any = REQUIRED
    check: Callable[[Any], str | None] | None = None
    doc: str = ""
    provenance: bool = False


class OpDef:
    """The definition of one op. Subclass, fill the class attributes, override the methods.

    Arity is `(min, max)` tensor inputs (max None: variadic). Optional inputs in the middle
    are passed as `None` to `infer`/`numpy` (their name in the node is the empty string).
    """

    op: ClassVar[Op]
    attrs: ClassVar[Mapping[str, Attr]] = {}
    arity: ClassVar[tuple[int, int | None]] = (1, 1)
    # every output element is a multi-linear polynomial of the input elements with no constant term:
    # linear in each input separately, or (add, concat, ...) in all of them jointly (PET §3)
    multilinear: ClassVar[bool] = False
    # out[i] depends on in[i] only (after broadcasting)
    elementwise: ClassVar[bool] = False
    # moves data, computes nothing: every output element is an input element (or a fill value)
    layout_only: ClassVar[bool] = False
    # every output is a strided view of the first input (when that is contiguous): a backend runs
    # the op with no kernel, and the cost models charge it as such
    view: ClassVar[bool] = False
    # applied to weights alone, it may be evaluated once at compile time (not black boxes, which
    # may be random, nor control flow)
    foldable: ClassVar[bool] = True
    # its output repeats its input (a broadcast): folding a weight-only application into a weight
    # would store the repetition (an 8 MB zero buffer for one zero), so it stays a computation
    repeats_input: ClassVar[bool] = False
    # "gemm" | "conv": it runs as a cuBLAS GEMM / a cuDNN convolution (tensor cores); None: CUDA cores
    tensor_core: ClassVar[str | None] = None
    # the attributes that hold subprograms (`ir.Graph` bodies of control flow)
    bodies: ClassVar[tuple[str, ...]] = ()
    # -- facts other layers read: each replaces a table of op names a layer kept; the groups
    #    derived from them are in `einsat.ir.groups` --
    # f(x, y, ...) = f(y, x, ...): the first two inputs can be exchanged (with broadcasting)
    commutative: ClassVar[bool] = False
    # the output's dtype is the first input's (the shape analysis derives it so); False where it
    # comes from elsewhere (a comparison's bool, cast's attribute, where's branches)
    dtype_of_first: ClassVar[bool] = True
    # the output has the first input's shape and dtype (element-wise unary ops have it by being
    # element-wise; this flag states it for the others the shape analysis relies on)
    shape_of_first: ClassVar[bool] = False
    # every input element appears exactly once in the output: a reshape or a permutation of axes
    permutes: ClassVar[bool] = False
    # the output is the input's elements in the same row-major order: a reshape (implies permutes)
    reshapes: ClassVar[bool] = False
    # the output is the first input itself, same shape and values: the op only names a value
    aliases: ClassVar[bool] = False
    # the NumPy ufunc computing the op (the frontend traces that ufunc as the op); `bool_ufunc`:
    # the one computing it on bools (np.bitwise_and is logical_and there)
    ufunc: ClassVar[Any] = None
    bool_ufunc: ClassVar[Any] = None
    # the binary op it folds over its `axes` (reduce_sum folds add): `opdef(reduces).ufunc.reduce`
    reduces: ClassVar[Op | None] = None
    # a fused op's core: the op it computes when it has no bias, no residual and no activation
    fused_core: ClassVar[Op | None] = None
    # inputs read as parameters (divisors, indices, normalization statistics): with them fixed, the
    # op is affine in its other inputs; the PET verifier keeps them exact constants
    parameter_inputs: ClassVar[tuple[int, ...]] = ()
    # in half precision its result is exactly a value of its half operands (no rounding)
    exact_in_half: ClassVar[bool] = False
    # a unary element-wise op the layout laws move through transposes and reshapes
    # (f(transpose(x)) = transpose(f(x)), `rewrites.algebra.layout`); every unary element-wise op
    # commutes so, but each flagged op adds rules to the e-graph: True where they are wanted
    layout_commutes: ClassVar[bool] = False
    # EinNet's operator matching instantiates an expression as this op (`rewrites.derive.match`);
    # the number ranks ties, lowest first (a 1x1 conv is a matmul)
    matched: ClassVar[int | None] = None
    # the derivation generator searches EinNet derivations of it (`rewrites.derive.generator`)
    derivable: ClassVar[bool] = False
    # inter-expression fusion composes its expression with an eOperator child's
    # (`rewrites.derive.inter`, EinNet §5)
    eop_fusable: ClassVar[bool] = False
    # a chain of these becomes one eOperator by traversal merging (`rewrites.derive.fusion`):
    # element-wise math, reductions and normalizations over the trailing dims
    chain_fusable: ClassVar[bool] = False
    # a comparison: a bool element-wise function of two operands of one dtype
    comparison: ClassVar[bool] = False
    # a PET correction: its first input (the mutant's output) with regions overwritten by a fix
    correction: ClassVar[bool] = False
    # onnxruntime's blocked NCHWc layout (its NchwcTransformer; `cost.ort_fusion`): "blocked" ops
    # run in it, with reorders around them; "carried" ones run in it when their input comes in it
    nchwc: ClassVar[str | None] = None
    # on an [N, C, *spatial] input it computes the same function at every spatial position (with
    # unit strides): PET's layout mutations move its spatial dims (`rewrites.mutate.grammar`)
    per_position: ClassVar[bool] = False
    # applied to first inputs stacked along axis 0 (the other inputs shared), it gives their
    # outputs stacked along axis 0: PET groups independent applications over inputs of one shape
    # into one (`rewrites.mutate.subprograms`)
    stacks: ClassVar[bool] = False
    # inputs a one-node onnxruntime model holds as initializers (the weights it pre-packs, and
    # lays out for its blocked convolutions, only when constant; `runtime.profiler`)
    packed_inputs: ClassVar[tuple[int, ...]] = ()
    onnx_type: ClassVar[str | None] = None  # the ONNX op it exports to / imports from
    onnx_domain: ClassVar[str] = ""  # the ONNX domain of `onnx_type` ("com.microsoft": onnxruntime's contrib ops)
    doc: ClassVar[str] = ""

    @property
    def source(self) -> bool:
        """An op with no tensor inputs (constant): its value comes from its attributes."""
        return self.arity[1] == 0

    # -- attributes -------------------------------------------------------------------
    def normalize(self, attrs: dict[str, Any], types: Sequence[TensorType | None]) -> dict[str, Any]:
        """Hook: canonicalize attributes once input types are known (e.g. stride=2 -> (2, 2))."""
        return attrs

    def num_outputs(self, attrs: Mapping[str, Any]) -> int:
        return 1

    def is_multilinear(self, attrs: Mapping[str, Any]) -> bool:
        """Whether this application is multi-linear; ops whose linearity depends on their
        attributes (pad: only with constant 0) override it. Passes read this, not the flag."""
        return self.multilinear

    # -- semantics ----------------------------------------------------------------------
    def infer(self, types: Sequence[TensorType | None], attrs: Mapping[str, Any]) -> list[TensorType]:
        """Output types from input types; raise `ShapeError(reason)` when they do not fit."""
        raise NotImplementedError

    def numpy(self, args: Sequence[np.ndarray | None], attrs: Mapping[str, Any]) -> list[np.ndarray]:
        """The reference semantics: the executable specification of the op."""
        raise NotImplementedError

    # -- costs --------------------------------------------------------------------------
    def flops(self, ins: Sequence[TensorType | None], outs: Sequence[TensorType],
              attrs: Mapping[str, Any]) -> int:
        """Floating-point operations (a multiply-add counts 2)."""
        raise NotImplementedError

    def bytes(self, ins: Sequence[TensorType | None], outs: Sequence[TensorType],
              attrs: Mapping[str, Any]) -> int:
        """Bytes moved to and from memory if each input is read once and each output written once."""
        return sum(t.nbytes for t in ins if t is not None) + sum(t.nbytes for t in outs)

    # -- tensor algebra (EinNet §3) -------------------------------------------------------
    def expression(self, inputs: Sequence[TensorType | None], attrs: Mapping[str, Any]):
        """The op as a tensor-algebra expression (`einsat.ir.expr.Expr`) reading its inputs by
        position, or None: the op has none (a data-dependent index, a normalization) or none for
        these attributes (e.g. maxpool with padding, which pads with -inf, not 0)."""
        return None

    # -- ONNX ---------------------------------------------------------------------------
    def from_onnx(self, ctx, onode) -> tuple[list[str], dict[str, Any]]:
        """(einsat inputs, attributes) for an ONNX node of type `onnx_type`.

        Default: the same inputs, and the ONNX attributes of the same names. `ctx` is the
        import context of `einsat.ir.onnx.io` (`ctx.attrs(onode)`, `ctx.constant(name)`,
        `ctx.type(name)`, `ctx.opset`, `ctx.emit(...)`); raise `ctx.not_representable(reason)`
        to keep the node opaque instead.
        """
        onnx_attrs = ctx.attrs(onode)
        return list(onode.input), {k: v for k, v in onnx_attrs.items() if k in self.attrs}

    def onnx_outputs(self, onode) -> list[str]:
        """The ONNX node's outputs that are this op's outputs, in order ('' for one it leaves out).
        Default: all of them, in their order."""
        return list(onode.output)

    def to_onnx(self, ctx, node) -> None:
        """Emit ONNX nodes for `node` through the export context (`ctx.node(...)`,
        `ctx.constant(array)`). Default: one `onnx_type` node with the same attributes."""
        ctx.node(self.onnx_type, node.inputs, node.outputs, **dict(node.attrs))

    def onnx_call(self, ctx, inputs: list[str], output: str, dtype) -> str:
        """Write this op, with its default attributes, applied to `inputs` (of element type `dtype`)
        as `output`, where an eOperator's expression calls it (`expr.onnx`); returns `output`.
        Default: one `onnx_type` node. An op whose ONNX operator is newer than some opset cap
        writes its older form here too (Gelu)."""
        return ctx.node(self.onnx_type, inputs, [output])[0]


REGISTRY: dict[Op, OpDef] = {}


def register(cls: type[OpDef]) -> type[OpDef]:
    """Class decorator: add an op definition to the registry (once per op)."""
    if cls.op in REGISTRY:
        raise RuntimeError(f"op {cls.op} is defined twice: {REGISTRY[cls.op]} and {cls}")
    REGISTRY[cls.op] = cls()
    return cls


def opdef(op: Op) -> OpDef:
    try:
        return REGISTRY[op]
    except KeyError:
        raise AttributeValueError(f"op {op.value!r} has no definition in the registry") from None


def normalize_attrs(op: Op, attrs: Mapping[str, Any], types: Sequence[TensorType | None],
                    where: str = "") -> dict[str, Any]:
    """Fill defaults, convert kinds and validate: the one gate every node's attributes pass."""
    d = opdef(op)
    where = where or f"op {op.value!r}"
    unknown = set(attrs) - set(d.attrs)
    if unknown:
        raise AttributeValueError(
            f"{where}: unknown attribute(s) {sorted(unknown)}; {op.value} takes {sorted(d.attrs) or 'none'}")
    out: dict[str, Any] = {}
    for name, spec in d.attrs.items():
        if name in attrs and attrs[name] is not None:
            try:
                value = _KINDS[spec.kind](attrs[name])
            except (TypeError, ValueError) as e:
                raise AttributeValueError(
                    f"{where}: attribute {name}={attrs[name]!r} is not a valid {spec.kind}: {e}") from None
        elif spec.default is REQUIRED:
            raise AttributeValueError(f"{where}: attribute {name!r} is required")
        else:
            value = spec.default
        out[name] = value
    try:
        out = d.normalize(out, types)
    except ShapeError as e:
        raise ShapeError(f"{where}: {e}") from None
    except (TypeError, ValueError) as e:
        raise AttributeValueError(f"{where}: {e}") from None
    for name, spec in d.attrs.items():
        if spec.check is not None and out[name] is not None:
            reason = spec.check(out[name])
            if reason:
                raise AttributeValueError(f"{where}: attribute {name}={out[name]!r} {reason}")
    return out


# -- helpers shared by op definitions ----------------------------------------------------

def broadcast_shapes(*shapes: tuple) -> tuple:
    """NumPy's broadcasting of shapes of dims: a dim of 1 stretches, other dims must be equal. With
    symbolic dims, equality is `prove_eq`'s (true for all sizes); a pair it cannot decide (`batch`
    against 4) is a ShapeError naming them, never a guess."""
    if any(isinstance(d, SymDim) for s in shapes for d in s):
        return _broadcast_symbolic(shapes)
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeError(f"shapes {' and '.join(str(list(s)) for s in shapes)} do not broadcast") from None


def _broadcast_symbolic(shapes) -> tuple:
    rank = max(len(s) for s in shapes)
    out = []
    for k in range(rank):
        dims = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
        dims = [d for d in dims if not (isinstance(d, int) and d == 1)]
        first = dims[0] if dims else 1
        for d in dims[1:]:
            same = prove_eq(first, d)
            if not same:
                shown = " and ".join(str(list(s)) for s in shapes)
                why = "do not broadcast" if same is False else \
                    f"broadcast only at some sizes ({first} and {d} are not equal for every size of the symbols)"
                raise ShapeError(f"shapes {shown} {why}")
        out.append(first)
    return tuple(out)


def require_eq(a, b, what: str) -> None:
    """Dims `a` and `b` equal for all sizes (`prove_eq`), else a ShapeError: `what`, and for
    symbolic dims whether they differ always or only at some sizes."""
    same = prove_eq(a, b)
    if same:
        return
    if same is None:
        raise ShapeError(f"{what}: {a} and {b} are equal only at some sizes of "
                         f"{', '.join(sorted(symbols_of(a) | symbols_of(b)))}")
    raise ShapeError(f"{what}: {a} != {b}")


def same_dtype(types: Sequence[TensorType | None]) -> np.dtype:
    dts = {t.dtype for t in types if t is not None}
    if len(dts) > 1:
        raise ShapeError(f"inputs have different dtypes {sorted(d.name for d in dts)}")
    return dts.pop()


def positive(v) -> str | None:
    vals = v if isinstance(v, tuple) else (v,)
    return None if all(x > 0 for x in vals) else "must be positive"


def non_negative(v) -> str | None:
    vals = v if isinstance(v, tuple) else (v,)
    return None if all(x >= 0 for x in vals) else "must be non-negative"


def one_of(*choices) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {choices}"


def normalize_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0
