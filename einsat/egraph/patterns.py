"""Op applications in rule text, with attributes bound by name: the pattern builder.

    pat.conv("x", "w", stride="st", groups="1")     # (Conv st _ _ 1 x w (Absent))
    pat.concat("a", "b", axis="ax")                 # (Concat ax [a b])
    pat.concat(axis="ax", inputs="l")               # (Concat ax l): the whole input list
    pat.split("x", axis=1, sizes="n")               # (Split 1 n x): read with (Get ... i)

`pat.<op>` exists for every registry op (named like its builder method, `Op.value`), and
renders its egglog constructor (`einsat.egraph.encoding`) with the attributes in registry
order. An attribute not named is a fresh wildcard `_` (so in a rule's right side every attribute
must be named); an unknown name is an error. Values are egglog text (a variable, a literal
such as `"\\"relu\\""`, an expression) or Python ints and tuples of ints, written as egglog
literals (`(vec-of 1 1)`). Tensor inputs are positional: a missing optional input is
`(Absent)` (as in the encoding; pass `"_"` to match any), a variadic op's inputs become a
list (`[a b]`, expanded by `einsat.egraph.rules`).

Rules spell every application of an op that has attributes through `pat`, never by position:
the registry may reorder or add attributes without silently changing a rule
(`tests/rewrites/test_patterns.py` enforces it for every rule of the default schedule and the
shape analysis).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from einsat.egraph.encoding import Signature, signature
from einsat.errors import AttributeValueError
from einsat.ir.registry import REGISTRY, Op, opdef

WILD = "_"
NO_INPUT = "(Absent)"

Value = str | int | Sequence[int]


def _text(value: Value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, Sequence)):
        raise TypeError(f"expected egglog text, an int or a tuple of ints, got {value!r}")
    if isinstance(value, int):
        return str(value)
    return f"(vec-of {' '.join(_text(v) for v in value)})" if value else "(vec-empty)"


def head(sig: Signature) -> str:
    """The constructor name an application starts with (the one place the builder writes it)."""
    return sig.name


def apply(op: Op, *inputs: Value, **attrs: Value) -> str:
    """The egglog text of `op` applied to `inputs` with `attrs` by name (see the module docstring);
    `inputs="l"` binds a variadic op's whole input list."""
    sig = signature(op)
    whole = attrs.pop("inputs", None) if sig.variadic else None
    names = [name for name, _ in sig.attrs]
    unknown = sorted(set(attrs) - set(names))
    if unknown:
        raise AttributeValueError(f"{op.value} has no attribute(s) {unknown}; its attributes are {names}")
    args = [_text(attrs[name]) if name in attrs else WILD for name in names]
    lo = opdef(op).arity[0]
    if sig.variadic:
        if (whole is None) == (not inputs):
            raise AttributeValueError(f"{op.value}: give its inputs either positionally or as inputs=, not both")
        args.append(_text(whole) if whole is not None else f"[{' '.join(_text(i) for i in inputs)}]")
    else:
        if not lo <= len(inputs) <= sig.slots:
            raise AttributeValueError(f"{op.value} takes {lo} to {sig.slots} tensor inputs, got {len(inputs)}")
        args += [_text(i) for i in inputs] + [NO_INPUT] * (sig.slots - len(inputs))
    return f"({head(sig)} {' '.join(args)})"


class Patterns:
    """`pat.conv(...)`, `pat.transpose(...)`, ...: `apply` for each registry op, by its builder name."""

    def __getattr__(self, name: str) -> Callable[..., str]:
        try:
            op = Op(name)
        except ValueError:
            raise AttributeError(f"no op {name!r} in the registry") from None
        return partial(apply, op)

    def __dir__(self) -> list[str]:
        return sorted(op.value for op in REGISTRY)


pat = Patterns()
