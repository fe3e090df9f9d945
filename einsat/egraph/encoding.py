"""The egglog encoding of the op registry: sorts, one constructor per op, attribute literals.

Every registry op becomes one egglog constructor, derived from its `OpDef` (nothing here
names an op):

    (Conv stride padding dilation groups x w bias)      ; attrs first, in registry order, then inputs

(rule text builds these by attribute name: `einsat.egraph.patterns.pat.conv(x, w, stride=...)`)

- sorts: `Tensor` (a value), `TList` (a cons list of tensors: the inputs of a variadic op,
  `(TCons a (TCons b (TNil)))`), `Multi` (the result of an op that may have several outputs,
  read with `(Get m i)`);
- attributes are primitives: `int` -> i64, `float` -> f64, `str` -> String, `bool` -> bool,
  `ints` -> IVec (`Vec i64`), `floats` -> FVec (`Vec f64`). Attributes egglog cannot hold
  (`tensor`, `any`: arrays, ONNX protos, loop bodies) are a String *reference key* into the
  session's `AttrRefs` table. A `None` attribute value is a sentinel of its kind (`NONE_INT`, ...);
- a fixed-arity op gets its maximum number of Tensor slots; a missing optional input is
  `(Absent)`; a variadic op takes one `TList`;
- leaves: `(Input name)`, `(Weight name)` (a source weight, array in the session) and
  `(Fill value shape dtype)` (a constant tensor made by a rule: pooling as a convolution). A
  Fill exports as the weight `fill_<value>_<shape>_<dtype>`, and such a weight enters as a Fill.

PET's `Correct(mutant, fix, region)` and EinNet's eOperators are registry ops, hence
constructors like any other.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from einsat.errors import AttributeValueError
from einsat.ir.registry import REGISTRY, Op, OpDef, opdef

NONE_INT = -(2 ** 63)
NONE_FLOAT = -1.7976931348623157e308  # -float max: no attribute takes it
NONE_STR = "\x00none"

KIND_SORT = {"int": "i64", "float": "f64", "str": "String", "bool": "bool",
             "ints": "IVec", "floats": "FVec"}
REF_SORT = "String"

LEAVES = {"Input": "input", "Weight": "weight"}
RESERVED = {"Input", "Weight", "Fill", "Absent", "Get", "TNil", "TCons"}


def ctor_name(op: Op) -> str:
    """The constructor's name: the op's value in CamelCase (`reduce_sum` -> `ReduceSum`)."""
    return "".join(part.capitalize() for part in op.value.split("_"))


@dataclass(frozen=True)
class Signature:
    """How one op is encoded: attribute names and kinds, tensor slots, result sort."""

    op: Op
    name: str
    attrs: tuple[tuple[str, str], ...]   # (name, kind) in registry order
    slots: int                           # Tensor arguments; 0 with `variadic`
    variadic: bool
    multi: bool                          # returns Multi (read with Get)

    @property
    def arg_sorts(self) -> list[str]:
        sorts = [KIND_SORT.get(kind, REF_SORT) for _, kind in self.attrs]
        return sorts + (["TList"] if self.variadic else ["Tensor"] * self.slots)

    @property
    def sort(self) -> str:
        return "Multi" if self.multi else "Tensor"

    def declaration(self) -> str:
        return f"(constructor {self.name} ({' '.join(self.arg_sorts)}) {self.sort})"


def _signature(d: OpDef) -> Signature:
    lo, hi = d.arity
    multi = type(d).num_outputs is not OpDef.num_outputs
    return Signature(d.op, ctor_name(d.op), tuple((n, a.kind) for n, a in d.attrs.items()),
                     0 if hi is None else hi, hi is None, multi)


def signatures() -> dict[Op, Signature]:
    """The signature of every registered op (computed afresh: the registry may grow)."""
    sigs = {op: _signature(d) for op, d in REGISTRY.items()}
    names = [s.name for s in sigs.values()]
    clash = {n for n in names if names.count(n) > 1 or n in RESERVED}
    if clash:
        raise AttributeValueError(f"ops {sorted(clash)} map to the same egglog constructor name")
    return sigs


def signature(op: Op) -> Signature:
    opdef(op)  # a clear error for an unregistered op
    return _signature(REGISTRY[op])


def declarations(sigs: dict[Op, Signature]) -> str:
    """The egglog program declaring the sorts, every op's constructor and the leaves."""
    lines = [
        "(sort IVec (Vec i64))",
        "(sort FVec (Vec f64))",
        "(sort Tensor)",
        "(sort TList)",
        "(sort Multi)",
        "(constructor Input (String) Tensor)",
        "(constructor Weight (String) Tensor)",
        "(constructor Fill (f64 IVec String) Tensor)",
        "(constructor Absent () Tensor)",
        "(constructor Get (Multi i64) Tensor)",
        "(constructor TNil () TList)",
        "(constructor TCons (Tensor TList) TList)",
    ]
    lines += [s.declaration() for s in sorted(sigs.values(), key=lambda s: s.name)]
    return "\n".join(lines)


CONSTRUCTORS_EXTRA = ("Input", "Weight", "Fill", "Absent", "Get", "TNil", "TCons")


class AttrRefs:
    """Attribute values egglog cannot hold, by reference key (deterministic, deduplicated).

    Arrays are keyed by their content; other values by equality when hashable, else by identity.
    """

    def __init__(self):
        self.values: dict[str, Any] = {}
        self._by_value: dict[Any, str] = {}
        self._by_id: dict[int, str] = {}

    def key(self, kind: str, value: Any) -> str:
        if isinstance(value, np.ndarray):
            h = hashlib.sha1(f"{value.dtype.str}{value.shape}".encode())
            h.update(np.ascontiguousarray(value).view(np.uint8).data)  # bytes (bfloat16 too)
            h = h.hexdigest()
            k = f"{kind}:{h[:20]}"
            self.values.setdefault(k, value)
            return k
        try:
            memo, ident = self._by_value, (kind, type(value).__name__, value)
            hash(ident)
        except TypeError:
            memo, ident = self._by_id, id(value)
        if ident not in memo:
            memo[ident] = f"{kind}:{len(self.values)}"
            self.values[memo[ident]] = value
        return memo[ident]

    def value(self, key: str) -> Any:
        try:
            return self.values[key]
        except KeyError:
            raise AttributeValueError(f"attribute reference {key!r} is not in this session") from None


def encode_attr(kind: str, value: Any, refs: AttrRefs, where: str) -> Any:
    """A Python attribute value as an egglog literal value (int, float, str, bool, tuple)."""
    if kind not in KIND_SORT:
        return refs.key(kind, value)
    if value is None:
        none = {"int": NONE_INT, "float": NONE_FLOAT, "str": NONE_STR, "ints": (NONE_INT,),
                "floats": (NONE_FLOAT,)}
        if kind not in none:
            raise AttributeValueError(f"{where}: a {kind} attribute cannot be None in the e-graph")
        return none[kind]
    if kind in ("ints", "floats"):
        conv = int if kind == "ints" else float
        return tuple(conv(v) for v in value)
    return {"int": int, "float": float, "str": str, "bool": bool}[kind](value)


def decode_attr(kind: str, value: Any, refs: AttrRefs) -> Any:
    """The inverse of `encode_attr`."""
    if kind not in KIND_SORT:
        return refs.value(value)
    if kind == "int":
        return None if value == NONE_INT else int(value)
    if kind == "float":
        return None if value == NONE_FLOAT else float(value)
    if kind == "str":
        return None if value == NONE_STR else value
    if kind == "bool":
        return bool(value)
    if kind == "ints":
        return None if value == (NONE_INT,) else tuple(int(v) for v in value)
    return None if value == (NONE_FLOAT,) else tuple(float(v) for v in value)


def fill_name(value: float, shape: tuple[int, ...], dtype: str) -> str:
    """The weight name of a constant-filled tensor (a `Fill` leaf) in exports."""
    return f"fill_{value!r}_{'x'.join(map(str, shape))}_{dtype}"


def fill_of(name: str, array) -> tuple[float, tuple[int, ...], str] | None:
    """(value, shape, dtype) if the weight `name` is a `Fill` leaf's export, else None."""
    if not name.startswith("fill_"):
        return None
    try:
        value = float(name.split("_")[1])
    except (IndexError, ValueError):
        return None
    a = np.asarray(array)
    if name != fill_name(value, a.shape, a.dtype.name) or not (a == np.full(a.shape, value, a.dtype)).all():
        return None
    return value, a.shape, a.dtype.name
