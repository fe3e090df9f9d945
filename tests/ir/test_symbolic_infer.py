"""Every registered op's shape rule on symbolic types (issue #40, docs/dynamic-shapes.md).

The types come from the op's own drawn cases (`tests.gpu.cases.strategy`): a dim value of the
inputs is made a symbol, either everywhere it occurs (the dims stay equal: the rule must see
that) or in the first input only (a dim now equal to the others' only at one size: the rule
must refuse). The promise checked: `infer` on the symbolic types either raises a ShapeError
naming the symbol (a fact it needs holds only at some sizes), or gives types that, at every
size tried (1, 2, the drawn value, and larger), equal the static `infer` at that size, which
must succeed there. A symbolic result is a result for every size of the symbols: never a
specialization to the size the case was drawn at.
"""

from __future__ import annotations

import pytest

from einsat.errors import ShapeError
from einsat.ir.dims import SymDim, prove_eq, sym
from einsat.ir.registry import REGISTRY, Op, broadcast_shapes, require_eq
from einsat.ir.types import TensorType
from tests.gpu.cases import strategy
from tests.gpu.conftest import collect

S = "sym_n"
EXAMPLES = 4
OPS = sorted((op for op in REGISTRY if op is not Op.OPAQUE), key=lambda op: op.value)


def _symbolic(types, value, first_only):
    out = []
    for k, t in enumerate(types):
        if t is None or (first_only and k > 0):
            out.append(t)
        else:
            out.append(TensorType([sym(S) if d == value else d for d in t.shape], t.dtype))
    return out


def check_symbolic_infer(d, types, attrs, first_only) -> int:
    """The promise above for every dim value > 1 of `types`; the number of symbolic results."""
    results = 0
    for value in sorted({x for t in types if t is not None for x in t.shape if x > 1})[:3]:
        st = _symbolic(types, value, first_only)
        try:
            outs = d.infer(st, attrs)
        except ShapeError as e:
            assert S in str(e), f"{d.op.value} on {st}: a refusal must name the symbolic dim: {e}"
            continue
        results += 1
        assert any(not t.is_static for t in outs) or all(t is None or t.is_static for t in st) or outs == \
            d.infer(_static(st, value), attrs)
        for size in sorted({1, 2, value, value + 1, 2 * value + 3}):
            at = _static(st, size)
            try:
                want = d.infer(at, attrs)
            except ShapeError as e:
                raise AssertionError(f"{d.op.value}: infer on {st} gave {outs}, but at {S}={size} the static "
                                     f"types {at} are refused: {e}") from None
            got = [t.concrete({S: size}) for t in outs]
            assert got == want, f"{d.op.value} on {st} at {S}={size}: {got} != static {want}"
    return results


def _static(types, size):
    return [None if t is None else t.concrete({S: size}) for t in types]


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.value)
def test_infer_on_symbolic_types_holds_at_every_size(op):
    d = REGISTRY[op]
    cases = collect(strategy(op.value), EXAMPLES)
    for case in cases:
        node = case.graph.nodes[-1]
        types = [case.graph.types[i] if i else None for i in node.inputs]
        for first_only in (False, True):
            check_symbolic_infer(d, types, node.attrs, first_only)


def test_most_ops_infer_symbolic_types():
    """Not every op refuses: the ones a transformer uses give symbolic results."""
    for op in (Op.ADD, Op.MATMUL, Op.SOFTMAX, Op.LAYERNORM, Op.TRANSPOSE, Op.CONCAT, Op.GATHER):
        d, ok = REGISTRY[op], 0
        for case in collect(strategy(op.value), EXAMPLES):
            node = case.graph.nodes[-1]
            ok += check_symbolic_infer(d, [case.graph.types[i] if i else None for i in node.inputs],
                                       node.attrs, first_only=False)
        assert ok, f"{op.value} refused every symbolic type"


def test_broadcast_decides_by_proof():
    b, s = sym("batch"), sym("sequence")
    assert broadcast_shapes((b, 1, 64), (1, s, 64)) == (b, s, 64)
    assert broadcast_shapes((b * s,), (s * b,)) == (b * s,)
    with pytest.raises(ShapeError, match="only at some sizes.*batch"):
        broadcast_shapes((b, 4), (4, 4))  # batch = 4 broadcasts, batch = 3 does not
    with pytest.raises(ShapeError, match="do not broadcast"):
        broadcast_shapes((b + 4, 4), (4, 4))  # batch + 4 > 4 at every size


def test_require_eq_names_the_dims():
    b = sym("batch")
    require_eq(b * 2, b + b, "rows")
    with pytest.raises(ShapeError, match="rows: batch and 8 are equal only at some sizes of batch"):
        require_eq(b, 8, "rows")
    with pytest.raises(ShapeError, match=r"rows: batch \+ 8 != 8"):
        require_eq(b + 8, 8, "rows")


def test_tensor_type_with_symbols():
    b, s = sym("batch"), sym("sequence")
    t = TensorType([b, s, 768])
    assert not t.is_static and TensorType([2, 3]).is_static
    assert t.size == b * s * 768 and isinstance(t.size, SymDim)
    assert t.nbytes == b * s * 3072
    assert t.concrete({"batch": 2, "sequence": 5}) == TensorType([2, 5, 768])
    assert t.concrete({"batch": 2}) == TensorType([2, s, 768])
    assert hash(TensorType([b, s, 768])) == hash(t) and str(t) == "[batch, sequence, 768] f32"
    assert t.symbols == {"batch", "sequence"}
    assert prove_eq(TensorType([b * 2]).size, b + b)
