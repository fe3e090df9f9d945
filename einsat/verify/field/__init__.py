"""Exact arithmetic over the field of integers mod p = 2^31 − 1 (PET §5.1, Theorem 2).

Values are int64 NumPy arrays of residues in [0, p). No operation overflows: a product of two
residues is below 2^62, and sums are reduced after every product. Matrix products split each
operand into 11-bit limbs and multiply them with float64 BLAS, exact while a dot product has at
most 2^11 terms (longer ones are chunked).

Real numbers enter the field through `embed`: every finite float is a dyadic rational m·2^e and
maps to m·2^e mod p (2 is invertible mod p). The map is a ring homomorphism on dyadic rationals,
so a program's exact real semantics over float constants is mirrored exactly in the field. (2 has
order 31 mod p, so 1.0 and 2^31 share a residue: constants that differ by such factors collide.)

Random field values are a function of (key, flat position): any subset of a tensor can be drawn
without drawing the rest, and every evaluation of the same key sees the same tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from einsat.errors import VerificationError
from einsat.ir.types import is_float

P = 2**31 - 1

_U64 = np.uint64
_GOLDEN = _U64(0x9E3779B97F4A7C15)
_M1 = _U64(0xBF58476D1CE4E5B9)
_M2 = _U64(0x94D049BB133111EB)


class NotMultilinearError(VerificationError):
    """A program contains an op that has no exact meaning over the field."""


def embed(values) -> np.ndarray:
    """Float, int or bool array -> residues mod p, exact for every finite float (dyadic rational)."""
    a = np.asarray(values)
    if a.dtype == np.bool_ or np.issubdtype(a.dtype, np.integer):
        return np.mod(a.astype(np.int64), P)
    a = a.astype(np.float64)
    if not np.all(np.isfinite(a)):
        raise VerificationError("cannot embed a non-finite value (nan or inf) in the field")
    mant, exp = np.frexp(a)                       # a = mant * 2**exp, 0.5 <= |mant| < 1
    m = np.round(mant * 2.0**53).astype(np.int64)  # exact: 53-bit mantissa
    shift = np.mod(exp.astype(np.int64) - 53, 31)  # 2**31 == 1 (mod p)
    return np.mod(np.mod(m, P) * np.left_shift(np.int64(1), shift), P)


EXACT_DENOMINATOR = 4096  # constants are read as fractions p/q with q up to this
EXACT_VALUES = 64         # ... when a constant tensor holds at most this many distinct values


def embed_constant(values) -> np.ndarray:
    """An exact constant (a uniform weight, a fill, a `Constant`) -> residues: each float is read
    as the fraction p/q with the smallest q <= `EXACT_DENOMINATOR` that rounds to it in its own
    dtype (float32(1/9) is 1/9, 0.5 is 1/2), else as its dyadic value (`embed`).

    A mutant may bring constants of its own, computed in floating point: an average pool as a
    depthwise conv of weight float32(1/9) must meet the pool's exact division by 9 (`inverse`).
    Both programs of a pair embed their constants alike, and a fraction with a small q is the
    real value the rounded float stands for. Tensors with many distinct values (and integers,
    and magnitudes beyond 2^20) are embedded as they are."""
    a = np.asarray(values)
    if not is_float(a.dtype):
        return embed(a)
    distinct, where = np.unique(a, return_inverse=True)
    if len(distinct) > EXACT_VALUES or not np.all(np.isfinite(distinct)) or np.any(np.abs(distinct) > 2.0**20):
        return embed(a)
    q = np.arange(1, EXACT_DENOMINATOR + 1, dtype=np.float64)
    out = embed(distinct)
    for k, v in enumerate(distinct):
        p = np.rint(float(v) * q)
        hit = np.flatnonzero((p / q).astype(a.dtype) == v)
        if len(hit):
            j = hit[0]
            out[k] = int(p[j]) % P * int(inverse(np.int64(j + 1))) % P
    return out[where].reshape(a.shape)


def unique(a: np.ndarray) -> np.ndarray:
    """Sorted unique values of an int array (a sort: NumPy's hash-based unique is slower here;
    an array already strictly increasing comes back as it is)."""
    a = np.asarray(a, dtype=np.int64).reshape(-1)
    if len(a) < 2 or bool(np.all(a[1:] > a[:-1])):
        return a
    a = np.sort(a)
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def inverse(a) -> np.ndarray:
    """Multiplicative inverse mod p (Fermat); zero has none."""
    a = np.asarray(a, dtype=np.int64)
    if np.any(a % P == 0):
        raise VerificationError("division by zero in the field")
    values, where = np.unique(np.mod(a, P), return_inverse=True)
    inv = np.array([pow(int(v), P - 2, P) for v in values], dtype=np.int64)
    return inv[where].reshape(a.shape)


def mul(a, b) -> np.ndarray:
    return np.mod(np.multiply(a, b, dtype=np.int64), P)


def add(a, b) -> np.ndarray:
    return np.mod(np.add(a, b, dtype=np.int64), P)


def sub(a, b) -> np.ndarray:
    return np.mod(np.subtract(a, b, dtype=np.int64), P)


def sum_mod(a: np.ndarray, axis=None, keepdims=False) -> np.ndarray:
    """Sum of residues mod p: exact while fewer than 2^32 terms are summed at once."""
    return np.mod(np.sum(a, axis=axis, keepdims=keepdims, dtype=np.int64), P)


def dot_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """sum(a * b, axis=-1) mod p for residue arrays: a split in a 15-bit high and a 16-bit low
    limb keeps each product below 2^47, so 2^16 of them sum without overflow."""
    out = np.zeros(np.broadcast_shapes(a.shape, b.shape)[:-1], dtype=np.int64)
    step = 1 << 16
    for s in range(0, a.shape[-1], step):
        x, y = a[..., s:s + step], b[..., s:s + step]
        hi = np.mod(np.sum((x >> 16) * y, axis=-1), P)
        lo = np.mod(np.sum((x & 0xFFFF) * y, axis=-1), P)
        out = np.mod(out + hi * 65536 + lo, P)
    return out


LIMB_BITS = 11            # limbs of the smaller matmul operand: 3 of them cover 31 bits
LIMB_DOT = 1 << 11        # terms per float64 dot product: 2^11 · 2^31 · 2^11 = 2^53


def matmul_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """np.matmul over the field (2-d or batched with broadcasting), through exact float64 BLAS.

    The smaller operand is split into three 11-bit limbs and the larger one is used whole (its
    residues are exact in float64): each product is below 2^42, so dot products of up to 2^11
    terms are exact below 2^53; longer ones are chunked and reduced mod p.
    """
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    split_b = b.size <= a.size
    whole, small = (a, b) if split_b else (b, a)
    whole_f = whole.astype(np.float64)
    mask = (1 << LIMB_BITS) - 1
    limbs = [((small >> (LIMB_BITS * j)) & mask).astype(np.float64) for j in range(3)]
    k = a.shape[-1]
    out = None
    for s in range(0, max(k, 1), LIMB_DOT):
        part = None
        for j, limb in enumerate(limbs):
            if split_b:
                prod_ = np.matmul(whole_f[..., s:s + LIMB_DOT], limb[..., s:s + LIMB_DOT, :])
            else:
                prod_ = np.matmul(limb[..., s:s + LIMB_DOT], whole_f[..., s:s + LIMB_DOT, :])
            term = np.mod(np.mod(prod_.astype(np.int64), P) << (LIMB_BITS * j), P)
            part = term if part is None else part + term
        part = np.mod(part, P)
        out = part if out is None else np.mod(out + part, P)
    return out


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a bijection of uint64 with good avalanche."""
    z = z ^ (z >> _U64(30))
    z = z * _M1
    z = z ^ (z >> _U64(27))
    z = z * _M2
    return z ^ (z >> _U64(31))


def mix_key(*parts: int) -> int:
    """A 64-bit key from integers (seed, test number, variable number, ...)."""
    z = np.array([0], dtype=_U64)
    with np.errstate(over="ignore"):
        for part in parts:
            z = _mix(z + _U64(part & 0xFFFFFFFFFFFFFFFF) * _GOLDEN + _GOLDEN)
    return int(z[0])


def hash_rows(rows: np.ndarray) -> np.ndarray:
    """One non-negative int64 hash per row of an int64 (or float64, by its bits) matrix."""
    rows = np.ascontiguousarray(rows)
    if rows.dtype != np.int64:
        rows = rows.astype(np.float64).view(np.int64)
    h = np.zeros(rows.shape[0], dtype=_U64)
    with np.errstate(over="ignore"):
        for col in rows.T:
            h = _mix(h * _GOLDEN + col.astype(_U64) + _GOLDEN)
    return (h >> _U64(2)).astype(np.int64)


def random_at(key: int, flat: np.ndarray) -> np.ndarray:
    """Uniform residues at flat positions `flat` of the random tensor named by `key`."""
    with np.errstate(over="ignore"):
        z = np.asarray(flat, dtype=np.int64).astype(_U64) * _GOLDEN + _U64(key)
        return (_mix(z) % _U64(P)).astype(np.int64)


@dataclass(frozen=True)
class Source:
    """Field values of a graph input or weight: a random tensor (`key`), a constant, or both added.

    `degree` is 1 when the source is a variable (random), 0 when it is a constant.
    """

    key: int | None = None
    const: np.ndarray | None = None  # residues, the tensor's full shape

    @property
    def degree(self) -> int:
        return 0 if self.key is None else 1

    def at(self, flat: np.ndarray, test: int) -> np.ndarray:
        flat = np.asarray(flat, dtype=np.int64)
        out = np.zeros(flat.shape, dtype=np.int64)
        if self.key is not None:
            out = random_at(mix_key(self.key, test), flat)
        if self.const is not None:
            out = add(out, self.const.reshape(-1)[flat])
        return out

    def dense(self, shape: tuple[int, ...], test: int) -> np.ndarray:
        size = int(np.prod(shape, dtype=np.int64))
        return self.at(np.arange(size, dtype=np.int64), test).reshape(shape)
