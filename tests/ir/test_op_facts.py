"""Op facts live on the op: no module outside `einsat/ir/` keeps a table of op names.

A layer that needs "the view ops" or "the commutative ops" asks the registry (a flag on `OpDef`,
or a group derived from flags in `einsat.ir.groups`); per-layer behaviour of an op registers
itself beside the code that implements it (`@implements` in gpu, the field/split/restrict rules in
verify). This test reads every module of `einsat/` outside `ir/` with `ast` and finds the
module-level collections that name ops: a set, frozenset, tuple, list or dict display (or a
comprehension, or a call of set/frozenset/tuple/list/dict) holding an `Op` member (`Op.X`,
`Op["X"]`, `Op("x")`), or only `Op` member names as strings ("RESHAPE"), or only op values as
strings ("matmul", "gemm") of which one at least is not a function of the expression language
(`einsat.ir.expr.nodes`: "add", "relu" ... are its names too, and a table of those is the
expression language's, as the field's evaluation of them is), and module-level item assignments
`TABLE[Op.X] = ...`. It expects none, with no exemption.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from einsat.ir.expr.nodes import BINARY, UNARY
from einsat.ir.registry import Op

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "einsat"

OP_NAMES = {op.name for op in Op}
OP_VALUES = {op.value for op in Op}
EXPRESSION_FUNCTIONS = BINARY | UNARY


def _names_op(node: ast.AST) -> bool:
    """`Op.X`, `Op["X"]` or `Op("x")` anywhere under `node`, or two or more strings that are all
    `Op` member names ("RESHAPE", "FLATTEN": a table read with `Op[name]` or `node.op.name`)."""
    strings = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    if len(strings) >= 2 and all(v in OP_NAMES for v in strings):
        return True
    if len(strings) >= 2 and all(v in OP_VALUES for v in strings) \
            and not all(v in EXPRESSION_FUNCTIONS for v in strings):
        return True  # "matmul", "gemm": op values, not (only) the expression language's functions
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "Op" \
                and n.attr.isupper():
            return True
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id == "Op":
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "Op":
            return True
    return False


COLLECTIONS = (ast.Set, ast.List, ast.Tuple, ast.Dict, ast.SetComp, ast.ListComp, ast.DictComp, ast.GeneratorExp)
CONSTRUCTORS = {"set", "frozenset", "tuple", "list", "dict", "sorted"}


def _is_collection(value: ast.AST) -> bool:
    if isinstance(value, COLLECTIONS):
        return True
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in CONSTRUCTORS:
        return True
    if isinstance(value, ast.BinOp):  # A | B, A + [..]
        return _is_collection(value.left) or _is_collection(value.right)
    return False


def _module_statements(body: list[ast.stmt]):
    """Module-level statements, including those under module-level if/for/while/with/try."""
    for st in body:
        yield st
        if isinstance(st, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
            for field in ("body", "orelse", "finalbody"):
                yield from _module_statements(getattr(st, field, []) or [])
            for handler in getattr(st, "handlers", []):
                yield from _module_statements(handler.body)


def op_tables(source: str) -> list[tuple[str, int]]:
    """(name, line) of every module-level collection of op names in `source`."""
    found = []
    for st in _module_statements(ast.parse(source).body):
        if isinstance(st, ast.Assign):
            targets, value = st.targets, st.value
        elif isinstance(st, (ast.AnnAssign, ast.AugAssign)) and st.value is not None:
            targets, value = [st.target], st.value
        else:
            continue
        for t in targets:
            if isinstance(t, ast.Subscript) and _names_op(t.slice):  # TABLE[Op.X] = ...
                found.append((ast.unparse(t.value), st.lineno))
            elif _is_collection(value) and _names_op(value):
                names = t.elts if isinstance(t, ast.Tuple) else [t]
                found.extend((ast.unparse(n), st.lineno) for n in names)
    return found


def scan() -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("einsat/ir/"):
            continue
        for name, line in op_tables(path.read_text()):
            out.setdefault(rel, {})[name] = line
    return out


def test_no_module_outside_ir_keeps_a_table_of_op_names():
    found = scan()
    unexpected = [f"{f}:{line}: {name}" for f, names in found.items() for name, line in names.items()]
    assert not unexpected, ("module-level tables of op names outside einsat/ir/ (ask the registry: a flag on "
                            "OpDef or a group in einsat.ir.groups):\n" + "\n".join(unexpected))


@pytest.mark.parametrize("source, names", [
    ("X = frozenset({Op.ADD, Op.MUL})", ["X"]),
    ("X: dict = {Op.ADD: 1}", ["X"]),
    ("A, B = (Op.ADD,), [Op.MUL]", ["A", "B"]),
    ("X = tuple(Op[n] for n in ('ADD',))", ["X"]),
    ("T = {}\nfor n in ('ADD',):\n    T[Op[n]] = 1", ["T"]),
    ("if True:\n    X = {Op.ADD} | Y", ["X"]),
    ("X = {op for op, d in REGISTRY.items() if d.elementwise}", []),  # asks the registry
    ("X = Op.ADD", []),  # one op is no table
    ('VIEWS = ("RESHAPE", "FLATTEN")', ["VIEWS"]),  # op names, read with Op[name]
    ('MODES = ("constant", "edge")', []),
    ('GEMMS = ("matmul", "batchmatmul", "gemm")', ["GEMMS"]),  # op values
    ('X = sorted(set(E) - {"batchnorm", "identity"})', ["X"]),
    ('ZERO_KEEPING = frozenset({"relu", "neg", "abs"})', []),  # the expression language's functions
    ('FNS = {"add": f, "mul": g}', []),
    ("def f():\n    return {Op.ADD}", []),  # not module level
])
def test_the_scan_finds_tables(source, names):
    assert [n for n, _ in op_tables(source)] == names
