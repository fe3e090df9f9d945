"""`TracedArray`: the stand-in for `np.ndarray` while a function is traced.

It speaks NumPy's protocols (`__array_ufunc__`, `__array_function__`), indexing and the usual
methods, so one function body runs on real arrays (the oracle) and on traced ones (the
program). What cannot be traced fails on the user's line with a `FrontendError`: turning a
traced value into a Python number or bool (data-dependent control flow: use `loop` / `cond`),
and handing it to code that wants the raw buffer (`np.asarray`, C extensions: an opaque call
that could read or mutate it behind einsat's back).
"""

from __future__ import annotations

import numpy as np

from einsat.frontend import creation, emit, functions, indexing  # noqa: F401  (fill dispatch.FUNCTIONS)
from einsat.frontend.dispatch import array_function
from einsat.frontend.tracer import Traced, fail
from einsat.frontend.ufuncs import ufunc_call
from einsat.ir.registry import Op


def _data_dependent(what: str):
    def method(self, *args, **kwargs):
        raise fail(f"{what} of traced value {self._name} depends on the data: it is needed as a Python "
                   "number here (Python control flow, a shape, or a write into a NumPy array). Keep it "
                   "a tensor: einsat.frontend.loop / cond for control flow, np.zeros(shape) "
                   "for buffers")
    return method


class TracedArray(Traced):
    """A value of the program being traced, with NumPy's interface."""

    __slots__ = ()
    __array_priority__ = 1000
    __hash__ = object.__hash__

    # -- metadata (static) -------------------------------------------------------------------
    @property
    def type(self):
        return self._trace.types[self._name]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> np.dtype:
        return self.type.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return self.type.size

    @property
    def T(self) -> TracedArray:
        return self.transpose()

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        for k in range(len(self)):
            yield self[k]

    def __repr__(self) -> str:
        return f"TracedArray({self._name}: {self.type})"

    # -- NumPy protocols --------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return ufunc_call(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return array_function(func, args, kwargs)

    def __array__(self, dtype=None, copy=None):
        raise fail(f"traced value {self._name} is handed to code einsat cannot trace (it asked for "
                   "the raw NumPy array: np.asarray, a C extension, an opaque call); a read or an "
                   "in-place update there cannot be functionalized. Use NumPy functions on the "
                   "array itself, and create buffers with np.zeros(shape)")

    __bool__ = _data_dependent("the truth value")
    __int__ = _data_dependent("int()")
    __float__ = _data_dependent("float()")
    __complex__ = _data_dependent("complex()")
    __index__ = _data_dependent("using it as a Python index")
    item = _data_dependent(".item()")
    tolist = _data_dependent(".tolist()")

    # -- indexing -----------------------------------------------------------------------------
    def __getitem__(self, key):
        return indexing.getitem(self, key)

    def __setitem__(self, key, value):
        indexing.setitem(self, key, value)

    # -- arithmetic: every operator is the NumPy ufunc, so dtypes follow NumPy ---------------
    def __add__(self, o): return np.add(self, o)
    def __radd__(self, o): return np.add(o, self)
    def __sub__(self, o): return np.subtract(self, o)
    def __rsub__(self, o): return np.subtract(o, self)
    def __mul__(self, o): return np.multiply(self, o)
    def __rmul__(self, o): return np.multiply(o, self)
    def __truediv__(self, o): return np.true_divide(self, o)
    def __rtruediv__(self, o): return np.true_divide(o, self)
    def __floordiv__(self, o): return np.floor_divide(self, o)
    def __rfloordiv__(self, o): return np.floor_divide(o, self)
    def __pow__(self, o): return np.power(self, o)
    def __rpow__(self, o): return np.power(o, self)
    def __matmul__(self, o): return np.matmul(self, o)
    def __rmatmul__(self, o): return np.matmul(o, self)
    def __and__(self, o): return np.bitwise_and(self, o)
    def __rand__(self, o): return np.bitwise_and(o, self)
    def __or__(self, o): return np.bitwise_or(self, o)
    def __ror__(self, o): return np.bitwise_or(o, self)
    def __xor__(self, o): return np.bitwise_xor(self, o)
    def __rxor__(self, o): return np.bitwise_xor(o, self)
    def __neg__(self): return np.negative(self)
    def __pos__(self): return np.positive(self)
    def __abs__(self): return np.absolute(self)
    def __invert__(self): return np.invert(self)
    def __lt__(self, o): return np.less(self, o)
    def __le__(self, o): return np.less_equal(self, o)
    def __gt__(self, o): return np.greater(self, o)
    def __ge__(self, o): return np.greater_equal(self, o)
    def __eq__(self, o): return np.equal(self, o)  # noqa: E704
    def __ne__(self, o): return np.not_equal(self, o)

    # in place: NumPy's `out=` path records the mutation and returns this same object; a value
    # NumPy holds as a scalar is immutable, so there `+=` makes a new value, as in NumPy
    def _inplace(self, ufunc, o):
        if self._name in self._trace.scalars:
            return ufunc(self, o)
        return ufunc(self, o, out=self)

    def __iadd__(self, o): return self._inplace(np.add, o)
    def __isub__(self, o): return self._inplace(np.subtract, o)
    def __imul__(self, o): return self._inplace(np.multiply, o)
    def __itruediv__(self, o): return self._inplace(np.true_divide, o)
    def __ifloordiv__(self, o): return self._inplace(np.floor_divide, o)
    def __ipow__(self, o): return self._inplace(np.power, o)
    def __imatmul__(self, o): return self._inplace(np.matmul, o)
    def __iand__(self, o): return self._inplace(np.bitwise_and, o)
    def __ior__(self, o): return self._inplace(np.bitwise_or, o)
    def __ixor__(self, o): return self._inplace(np.bitwise_xor, o)

    # -- methods: the same as the NumPy functions ---------------------------------------------
    def reshape(self, *shape, order="C"):
        return np.reshape(self, shape[0] if len(shape) == 1 else shape, order=order)

    def transpose(self, *axes):
        return np.transpose(self, axes[0] if len(axes) == 1 else (axes or None))

    def swapaxes(self, a, b): return np.swapaxes(self, a, b)
    def squeeze(self, axis=None): return np.squeeze(self, axis)
    def ravel(self, order="C"): return np.ravel(self, order)
    def copy(self, order="C"): return np.copy(self, order)
    def sum(self, axis=None, dtype=None, out=None, keepdims=False): return np.sum(self, axis, dtype, out, keepdims)
    def mean(self, axis=None, dtype=None, out=None, keepdims=False): return np.mean(self, axis, dtype, out, keepdims)
    def max(self, axis=None, out=None, keepdims=False): return np.max(self, axis, out, keepdims)
    def min(self, axis=None, out=None, keepdims=False): return np.min(self, axis, out, keepdims)
    def argmax(self, axis=None, out=None, keepdims=False): return np.argmax(self, axis, out, keepdims=keepdims)
    def clip(self, min=None, max=None, out=None): return np.clip(self, min, max, out=out)
    def dot(self, o): return np.dot(self, o)

    def flatten(self, order="C"):
        if order != "C":
            raise fail("only C-order flatten is supported")
        return emit.apply(self._trace, Op.RESHAPE, [self._name], "flat", shape=(self.size,))

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        tr = self._trace
        if np.dtype(dtype) == self.dtype:
            return emit.apply(tr, Op.IDENTITY, [self._name], "copy") if copy else self
        return emit.wrap(tr, emit.cast(tr, self._name, dtype))

    def fill(self, value) -> None:
        emit.mutate(self._trace, self._name, emit.lift(self._trace, value))
