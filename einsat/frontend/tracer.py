"""The trace: where a running function's tensor operations are recorded as an imperative program.

`Trace` owns the program being built: a stack of open blocks (a traced `loop` or `cond` body
is a nested block), value types, constants, and each value's alias facts: the storage it lives
in (its *root*: itself for fresh storage, its base's root for a view) and a *shadow*, a NumPy
array with the value's shape, dtype and memory layout, on which every view is replayed so that
NumPy itself decides what is a view, what is a copy and what is read-only.

`user_line()` names the statement of the user's code being traced, for error messages.
"""

from __future__ import annotations

import contextvars
import linecache
import os
import sys
from contextlib import contextmanager
from typing import Self

import numpy as np

from einsat.errors import FrontendError
from einsat.frontend.program import Block, Program
from einsat.ir.types import TensorType

_CURRENT: contextvars.ContextVar[Trace | None] = contextvars.ContextVar("einsat_trace", default=None)
LIBRARY_DIRS = (  # einsat's and NumPy's own code: not the user's line
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.path.dirname(np.__file__))


def current_trace() -> Trace | None:
    """The trace being recorded in this context, if any (`functionalize` sets it)."""
    return _CURRENT.get()


def user_line() -> str:
    """`file.py:12 in fn: x[i] = y`: the innermost frame outside einsat and NumPy."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(LIBRARY_DIRS):
        frame = frame.f_back
    if frame is None:
        return "<unknown line>"
    code = frame.f_code
    text = linecache.getline(code.co_filename, frame.f_lineno).strip()
    where = f"{os.path.basename(code.co_filename)}:{frame.f_lineno} in {code.co_name}"
    return f"{where}: {text}" if text else where


def fail(message: str) -> FrontendError:
    """A FrontendError naming the user's line. The trace remembers the first one: NumPy swallows
    some exceptions (e.g. from `float()` while filling an array) and raises its own instead."""
    error = FrontendError(f"{user_line()}: {message}")
    tr = _CURRENT.get()
    if tr is not None and tr.error is None:
        tr.error = error
    return error


class Traced:
    """A value of a trace as the traced function holds it: a name in a trace. `Trace.array_type`
    (`tensor.TracedArray`) adds NumPy's interface; recording code only needs this."""

    __slots__ = ("_name", "_trace")

    def __init__(self, trace, name: str):
        self._trace = trace
        self._name = name


class Trace:
    """The program being recorded. Values are names; `new_value` creates fresh storage, and
    `array_type(trace, name)` is what the function gets to hold (a `Traced` subclass)."""

    def __init__(self, name: str, array_type: type[Traced]):
        self.name = name
        self.array_type = array_type
        self.types: dict[str, TensorType] = {}
        self.constants: dict[str, np.ndarray] = {}
        self.root: dict[str, str] = {}          # value -> the storage it lives in
        self.readonly: set[str] = set()          # broadcast views (NumPy's are read-only)
        self.scope: dict[str, int] = {}          # value -> id of the block defining it
        self.blocks: list[Block] = [Block()]
        self.inputs: list[str] = []
        self.aliased_outputs: set[str] = set()   # loop/cond outputs that alias outer storage
        self.params: set[str] = set()            # loop parameters: never mutated in place
        self.scalars: set[str] = set()           # 0-d values NumPy would hold as scalars
        self._shadow: dict[str, np.ndarray] = {}
        self._const_cache: dict[tuple, str] = {}
        self._counter = 0
        self._token = None
        self.error: FrontendError | None = None  # the first error raised while tracing
        # fresh buffers whose contents are known at trace time, until written: (fill, shape, dtype)
        self.known: dict[str, tuple] = {}

    # -- context -------------------------------------------------------------------------
    def __enter__(self) -> Self:
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc) -> None:
        _CURRENT.reset(self._token)

    @contextmanager
    def block(self, block: Block):
        """Record into `block` (a loop or branch body) for the duration of the `with`."""
        self.blocks.append(block)
        try:
            yield block
        finally:
            self.blocks.pop()

    @property
    def current(self) -> Block:
        return self.blocks[-1]

    # -- values --------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        self._counter += 1
        return f"{hint}.{self._counter}"

    def new_value(self, hint: str, type_: TensorType, root: str | None = None,
                  shadow: np.ndarray | None = None, exact: bool = False) -> str:
        """Define a value in the current block: fresh storage unless `root` says whose view it is.
        The name is `hint.N`, or `hint` itself when `exact` (graph inputs)."""
        name = hint if exact else self.fresh(hint)
        self.types[name] = type_
        self.root[name] = root or name
        self.scope[name] = id(self.current)
        if shadow is not None:
            self._shadow[name] = shadow
        return name

    def shadow(self, name: str) -> np.ndarray:
        """A NumPy array laid out like the value (fresh storage is C-contiguous)."""
        s = self._shadow.get(name)
        if s is None:
            t = self.types[name]
            s = self._shadow[name] = np.empty(t.shape, t.dtype)
        return s

    def use(self, name: str) -> str:
        """Check that a value may be read here: defined in an enclosing (still open) block."""
        scope = self.scope.get(name)
        if scope is not None and scope not in {id(b) for b in self.blocks}:
            raise fail(f"value {name} was defined inside a loop or cond body that has ended; "
                       "return it from the body to use it outside")
        return name

    def constant(self, value, dtype=None) -> str:
        """A constant value (deduplicated), readable from every block."""
        a = np.array(value, dtype=dtype)
        key = (a.dtype.str, a.shape, a.tobytes())
        name = self._const_cache.get(key)
        if name is None:
            name = self._const_cache[key] = self.fresh("const")
            a.setflags(write=False)
            self.constants[name] = a
            self.types[name] = TensorType.of(a)
            self.root[name] = name
        return name

    def scalar(self, value):
        """Mark a traced 0-d result as what NumPy makes it: an immutable scalar, not a 0-d array
        (ufunc and reduction results, items, loop indices). Returns the value."""
        if not self.types[value._name].shape:
            self.scalars.add(value._name)
        return value

    def known_value(self, name: str) -> np.ndarray | None:
        """The contents of a constructor's buffer not written yet (a read-only array), else None."""
        fill = self.known.get(name)
        if fill is None:
            return None
        value = np.full(fill[1], fill[0], fill[2])
        value.setflags(write=False)
        return value

    def emit(self, stmt) -> None:
        self.current.stmts.append(stmt)

    def program(self, outputs: list[str], output_names: list[str]) -> Program:
        return Program(self.name, list(self.inputs), self.blocks[0], outputs, dict(self.types),
                       dict(self.constants), output_names, set(self.aliased_outputs))
