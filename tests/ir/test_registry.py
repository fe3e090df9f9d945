"""The op registry: every op is defined, completely, once, and docs/ops.md summarizes it (its flags are
checked against behaviour in `test_registry_flags.py`)."""

import re
from pathlib import Path

import numpy as np
import onnx
import pytest

from einsat.ir import REGISTRY, Op, OpDef
from einsat.ir.registry import _KINDS, REQUIRED, Attr

DOCS = Path(__file__).resolve().parents[2] / "docs" / "ops.md"

# ops that export as an expansion into standard ONNX nodes and that no ONNX op imports as
EXPORT_ONLY = {Op.BATCHMATMUL: "MatMul", Op.CORRECT: "Slice/Concat",
               Op.FUSED_CORRECT: "Slice/Concat/Reshape/Transpose", Op.EOP: "Range/Gather/ReduceSum"}


def overrides(d: OpDef, method: str) -> bool:
    return getattr(type(d), method) is not getattr(OpDef, method)


def test_every_op_has_a_definition():
    missing = sorted(op.value for op in Op if op not in REGISTRY)
    assert not missing, f"Op members without a registry definition: {missing}"


@pytest.mark.parametrize("op", sorted(REGISTRY, key=lambda o: o.value), ids=lambda o: o.value)
def test_definition_is_complete(op):
    d = REGISTRY[op]
    assert d.op is op
    for method in ("infer", "numpy", "flops"):
        assert overrides(d, method), f"{op.value} does not define {method}"
    for flag in ("multilinear", "elementwise", "layout_only", "view", "foldable", "repeats_input"):
        assert isinstance(getattr(d, flag), bool), f"{op.value}.{flag} must be a bool"
    assert d.tensor_core in (None, "gemm", "conv"), f"{op.value}.tensor_core"
    assert isinstance(d.bodies, tuple) and set(d.bodies) <= set(d.attrs), f"{op.value}.bodies names no attributes"
    lo, hi = d.arity
    assert 0 <= lo and (hi is None or hi >= lo)
    # the ONNX mapping: an ONNX op type that both directions use, or an export-only expansion
    if d.onnx_type is not None and d.onnx_domain:  # onnxruntime's contrib ops: onnx has no schema of them
        assert d.onnx_domain == "com.microsoft" and overrides(d, "to_onnx"), \
            f"{op.value}: a {d.onnx_domain} op must write a standard form where contrib ops are not allowed"
    elif d.onnx_type is not None:
        assert onnx.defs.has(d.onnx_type), f"{op.value}: {d.onnx_type!r} is not an ONNX op"
    else:
        assert overrides(d, "to_onnx"), f"{op.value} has neither an onnx_type nor a to_onnx"
    for name, spec in d.attrs.items():
        assert isinstance(spec, Attr) and spec.kind in _KINDS, f"{op.value}.{name}"
        if spec.default is not REQUIRED and spec.default is not None:
            converted = _KINDS[spec.kind](spec.default)  # a default is a valid value of its kind
            if spec.check is not None and not isinstance(converted, np.ndarray):
                assert spec.check(converted) is None, f"{op.value}.{name} default fails its check"


def test_flags_are_consistent():
    for op, d in REGISTRY.items():
        assert not (d.elementwise and d.layout_only), op.value
    # layout-only ops compute nothing
    layout = [op for op, d in REGISTRY.items() if d.layout_only]
    assert {Op.TRANSPOSE, Op.RESHAPE, Op.CONCAT, Op.SLICE, Op.GATHER}.issubset(layout)


def test_export_only_ops_are_not_imported():
    for op in EXPORT_ONLY:
        assert REGISTRY[op].onnx_type is None


def doc_table() -> dict[str, tuple[set[str], str]]:
    """op name -> its attribute names and its flags cell, read from the table in docs/ops.md."""
    rows = {}
    for line in DOCS.read_text().splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) < 3 or cells[0].startswith(("op (", "---")):
            continue
        attrs = set()
        if not cells[2].startswith("–"):
            depth, part, parts = 0, "", []
            for ch in cells[2]:  # split on commas outside parentheses and quotes
                depth += ch in "([" and 1 or 0
                depth -= ch in ")]" and 1 or 0
                if ch == "," and depth == 0:
                    parts.append(part)
                    part = ""
                else:
                    part += ch
            parts.append(part)
            attrs = {m.group(0) for p in parts if (m := re.match(r"\s*\w+", p))}
            attrs = {a.strip() for a in attrs}
        for name in cells[0].split(","):
            rows[name.strip().strip("`")] = attrs, cells[3]
    return rows


def test_docs_table_lists_every_op():
    missing = sorted(op.value for op in REGISTRY if op.value not in doc_table())
    assert not missing, f"docs/ops.md does not list {missing}"


def test_docs_table_has_the_registry_attribute_names():
    table = doc_table()
    for op, d in REGISTRY.items():
        if op.value in table:
            attrs, _ = table[op.value]
            assert attrs == set(d.attrs), \
                f"docs/ops.md lists {sorted(attrs)} for {op.value}, the registry {sorted(d.attrs)}"


def test_docs_table_states_the_registry_flags():
    table = doc_table()
    for op, d in REGISTRY.items():
        _, flags = table[op.value]
        said = {"element-wise": d.elementwise, "layout-only": d.layout_only, "view": d.view,
                f"tensor-core ({d.tensor_core})": d.tensor_core is not None, "never folded": not d.foldable,
                f"bodies: {', '.join(d.bodies)}": bool(d.bodies)}
        for words, flagged in said.items():
            assert (words in flags) == flagged, f"docs/ops.md: {op.value}'s flags {flags!r} vs {words!r}: {flagged}"


F = np.float32
BAD = [  # (op, input types, attributes, the reason the error must give)
    (Op.BATCHMATMUL, [(2, 3, 4), (3, 4, 5)], {}, "batch dims differ"),
    (Op.GEMM, [(3, 4), (5, 6)], {}, "contracted dims differ"),
    (Op.CONV_TRANSPOSE, [(1, 4, 5, 5), (3, 2, 3, 3)], {}, "weight's first dim 3"),
    (Op.AVGPOOL, [(1, 2, 4, 4)], {"kernel": (5, 5)}, "smaller than the window 5"),
    (Op.MAXPOOL, [(4, 4)], {"kernel": 2}, r"\[N, C, \*spatial\]"),
    (Op.GLOBAL_AVGPOOL, [(4, 4)], {}, r"\[N, C, \*spatial\]"),
    (Op.BATCHNORM, [(2, 3, 4), (3,), (3,), (3,), (4,)], {}, r"var \[4\] f32 must be \[3\]"),
    (Op.LAYERNORM, [(2, 3), (2,)], {}, "does not broadcast to the normalized dims"),
    (Op.SOFTMAX, [(2, 3)], {"axis": 2}, "axis 2 is out of range for rank 2"),
    (Op.REDUCE_SUM, [(2, 3)], {"axes": (5,)}, "axis 5 is out of range"),
    (Op.REDUCE_MEAN, [(2, 3)], {"axes": (0, -2)}, "name an axis twice"),
    (Op.TRANSPOSE, [(2, 3)], {"perm": (0,)}, "not a permutation"),
    (Op.RESHAPE, [(2, 3)], {"shape": (4,)}, "cannot reshape"),
    (Op.FLATTEN, [(2, 3)], {"axis": 3}, "axis 3 is out of range"),
    (Op.SQUEEZE, [(2, 3)], {"axes": (0,)}, "cannot squeeze axes"),
    (Op.UNSQUEEZE, [(2, 3)], {"axes": (0, 0)}, "name an axis twice"),
    (Op.EXPAND, [(2, 3)], {"shape": (4, 3)}, "do not broadcast"),
    (Op.CONCAT, [(2, 3), (3, 4)], {"axis": 0}, "differ in a dim other than the axis"),
    (Op.SPLIT, [(2, 3)], {"sizes": (1,)}, "do not add up"),
    (Op.SLICE, [(2, 3)], {"starts": (0,), "ends": (1, 2)}, "must have the same length"),
    (Op.PAD, [(2, 3)], {"pads": (1, 1)}, "need 4 values"),
    (Op.GATHER, [(2, 3), (2,)], {}, "indices must be int32 or int64"),
    (Op.CORRECT, [(2, 3), (1, 1)], {"region": (0, 0, 1, 2)}, "region's shape"),
    (Op.IDENTITY, [(2, 3), (2, 3)], {}, "takes 1 inputs"),
]


@pytest.mark.parametrize("op, shapes, attrs, reason", BAD, ids=[c[0].value for c in BAD])
def test_bad_input_names_node_op_shapes_and_reason(op, shapes, attrs, reason):
    from einsat.errors import EinsatError
    from einsat.ir import Graph, Node, TensorType

    inputs = {f"x{k}": TensorType(s, F) for k, s in enumerate(shapes)}
    with pytest.raises(EinsatError) as e:
        Graph([Node(op, list(inputs), ["y"], attrs, name="bad")], inputs, ["y"])
    msg = str(e.value)
    assert re.search(reason, msg), msg
    assert f"'bad' ({op.value})" in msg
    for name, t in inputs.items():
        assert f"{name}: {t}" in msg


def test_pad_is_multilinear_exactly_when_it_fills_zero():
    import numpy as np

    from einsat.ir import GraphBuilder
    from einsat.ir.registry import Op, opdef

    for mode, value, linear in [("constant", 0.0, True), ("constant", 1.5, False),
                                ("reflect", 0.0, True), ("edge", 0.0, True)]:
        b = GraphBuilder()
        x = b.input("x", (3, 4))
        g = b.build(b.pad(x, pads=(1, 1, 1, 1), mode=mode, value=value))
        node = g.nodes[0]
        assert opdef(Op.PAD).is_multilinear(node.attrs) is linear
        # the law itself: f(2x + y) == 2 f(x) + f(y) holds iff linear
        rng = np.random.default_rng(0)
        a, c = rng.standard_normal((2, 3, 4)).astype(np.float32)
        f = lambda v: opdef(Op.PAD).numpy([v], node.attrs)[0]
        assert np.allclose(f(2 * a + c), 2 * f(a) + f(c), atol=1e-5) is linear
